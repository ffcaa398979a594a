// make_backend(): the one place that maps a backend name to an implementation.
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/core/backend.h"
#include "runtime/cpu/cpu_backend.h"

namespace trainer {

// The cuda backend will be hooked in here behind #ifdef TRAINER_HAVE_CUDA.
bool cuda_backend_available() {
  return false;
}

std::unique_ptr<Backend> make_backend(const std::string& name, int local_rank) {
  (void)local_rank;  // selects the device once the cuda backend exists
  if (name == "cpu") return std::make_unique<cpu::CpuBackend>();
  if (name == "cuda")
    throw std::runtime_error(
        "backend 'cuda' is not built into this binary (rebuild with -DTRAINER_CUDA=ON on a "
        "machine with nvcc); available backends: cpu");
  throw std::runtime_error("unknown backend '" + name + "'; available backends: cpu");
}

}  // namespace trainer

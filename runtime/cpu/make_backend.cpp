// make_backend(): the one place that maps a backend name to an implementation.
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/core/backend.h"
#include "runtime/cpu/cpu_backend.h"
#ifdef TRAINER_HAVE_CUDA
#include "runtime/cuda/make_cuda_backend.h"
#endif

namespace trainer {

// True when the cuda backend is built in and a device is present at run time.
bool cuda_backend_available() {
#ifdef TRAINER_HAVE_CUDA
  return cuda::cuda_device_present();
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& name, int local_rank) {
  if (name == "cpu") {
    // a test's check that no op touches memory ZeRO released (see CpuBackend)
    const char* fault = std::getenv("TRAINER_TEST_FAULT_RELEASED");
    return std::make_unique<cpu::CpuBackend>(fault != nullptr && std::string(fault) == "1");
  }
#ifdef TRAINER_HAVE_CUDA
  if (name == "cuda") return cuda::make_cuda_backend(local_rank);  // device = LOCAL_RANK
  throw std::runtime_error("unknown backend '" + name + "'; available backends: cpu, cuda");
#else
  (void)local_rank;
  if (name == "cuda")
    throw std::runtime_error(
        "backend 'cuda' is not built into this binary (rebuild with -DTRAINER_CUDA=ON on a "
        "machine with nvcc); available backends: cpu");
  throw std::runtime_error("unknown backend '" + name + "'; available backends: cpu");
#endif
}

}  // namespace trainer

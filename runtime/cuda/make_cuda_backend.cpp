// The cuda backend's entry points for make_backend() (runtime/cpu/make_backend.cpp).
#include "runtime/cuda/make_cuda_backend.h"

#include "runtime/cuda/cuda_backend.h"

namespace trainer::cuda {

std::unique_ptr<Backend> make_cuda_backend(int local_rank) {
  return std::make_unique<CudaBackend>(local_rank);
}

bool cuda_device_present() {
  return device_count() > 0;
}

}  // namespace trainer::cuda

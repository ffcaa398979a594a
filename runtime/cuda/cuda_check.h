#pragma once
// Error checks for every CUDA, cuBLASLt and kernel launch: a failure throws CudaError naming the
// call, its file and line and the library's own message. Included by host code and kernels/.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace trainer::cuda {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(const char* what, const char* detail, const char* file,
                                   int line);

inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(what, cudaGetErrorString(e), file, line);
}

// After a kernel launch: the launch error, and with TRAINER_CUDA_SYNC=1 in the environment also
// the kernel's own error (a stream sync per launch: slow, for pinning down an illegal access).
void check_launch(const char* kernel, const char* file, int line);

}  // namespace trainer::cuda

#define CUDA_CHECK(call) ::trainer::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH(kernel) ::trainer::cuda::check_launch(kernel, __FILE__, __LINE__)

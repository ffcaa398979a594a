// CudaError construction and the per-launch check.
#include "runtime/cuda/cuda_check.h"

#include <cstdlib>
#include <cstring>

namespace trainer::cuda {

void throw_cuda_error(const char* what, const char* detail, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what +
                  " failed: " + detail);
}

namespace {
bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("TRAINER_CUDA_SYNC");
    return v && std::strcmp(v, "0") != 0 && *v;
  }();
  return on;
}
}  // namespace

void check_launch(const char* kernel, const char* file, int line) {
  check_cuda(cudaGetLastError(), kernel, file, line);
  if (sync_after_launch()) check_cuda(cudaDeviceSynchronize(), kernel, file, line);
}

}  // namespace trainer::cuda

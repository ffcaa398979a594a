#pragma once
// Factory of the cuda backend, free of CUDA headers so that runtime/cpu/make_backend.cpp (plain
// C++) can call it when the binary is built with TRAINER_HAVE_CUDA.
#include <memory>

#include "runtime/core/backend.h"

namespace trainer::cuda {

// The backend on device `local_rank` (cudaSetDevice); throws naming the reason when it cannot.
std::unique_ptr<Backend> make_cuda_backend(int local_rank);
// True when the driver reports at least one device at run time.
bool cuda_device_present();

}  // namespace trainer::cuda

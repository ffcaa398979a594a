// fp8 e4m3 quantization with per-tensor delayed scaling (runtime/core/fp8_recipe.h; the cpu
// reference is runtime/cpu/fp8.h and cpu_backend_fp8.cpp, matched bit for bit).
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "runtime/core/fp8_recipe.h"
#ifdef TRAINER_CUDA_EMULATION
#include "runtime/cpu/fp8.h"
#else
#include <cuda_fp8.h>
#endif

namespace trainer::kernels {
namespace {

__device__ inline uint8_t e4m3_bits(float v) {
#ifdef TRAINER_CUDA_EMULATION
  return cpu::fp8_e4m3_from_float(v);
#else
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
#endif
}

// partials[block] = max |x| over the block's grid-stride share (NaN skipped, as fmaxf does).
__global__ void amax_partials_kernel(float* partials, const uint16_t* x, int64_t n) {
  __shared__ float red[32];
  float m = 0.0f;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    m = fmaxf(m, fabsf(from_bf16_bits(x[i])));
  m = block_reduce(m, red, MaxOp{}, 0.0f);
  if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// One block: the amax of the partials moves `state` (one tensor's kFp8TensorFloats) on, and
// used[0], used[1] get the scale that quantizes this call's tensor and its inverse.
__global__ void update_scaling_kernel(float* state, float* used, const float* partials, int parts) {
  __shared__ float red[32];
  float m = 0.0f;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) m = fmaxf(m, partials[i]);
  m = block_reduce(m, red, MaxOp{}, 0.0f);
  if (threadIdx.x != 0) return;
  float* history = state;
  const float previous = state[kFp8AmaxHistory];
  const bool fresh = previous == 0.0f;
  for (int i = kFp8AmaxHistory - 1; i > 0; --i) history[i] = history[i - 1];
  history[0] = m;
  float top = 0.0f;
  for (int i = 0; i < kFp8AmaxHistory; ++i) top = fmaxf(top, history[i]);
  float scale = previous;
  if (top > 0.0f && top < INFINITY)
    scale = kFp8E4m3Max / top;
  else if (fresh)
    scale = 1.0f;
  state[kFp8AmaxHistory] = scale;
  state[kFp8AmaxHistory + 1] = 1.0f / scale;
  const float use = fresh ? scale : previous;
  used[0] = use;
  used[1] = 1.0f / use;
}

__global__ void quantize_kernel(uint8_t* out, const uint16_t* x, int64_t n, const float* scale) {
  const float s = *scale;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = e4m3_bits(from_bf16_bits(x[i]) * s);
}

}  // namespace

void fp8_quantize_delayed(uint8_t* out, const uint16_t* x, int64_t n, float* tensor_state,
                          float* used, float* partials, cudaStream_t stream) {
  launch(amax_partials_kernel, kReducePartials, kThreads, stream, partials, x, n);
  CUDA_CHECK_LAUNCH("amax_partials_kernel");
  launch(update_scaling_kernel, 1, kThreads, stream, tensor_state, used,
         static_cast<const float*>(partials), kReducePartials);
  CUDA_CHECK_LAUNCH("update_scaling_kernel");
  if (n == 0) return;
  launch(quantize_kernel, grid_for(n), kThreads, stream, out, x, n,
         static_cast<const float*>(used));
  CUDA_CHECK_LAUNCH("quantize_kernel");
}

}  // namespace trainer::kernels

// fp8 e4m3 quantization with per-tensor delayed scaling (runtime/core/fp8_recipe.h; the cpu
// reference is runtime/cpu/fp8.h and cpu_backend_fp8.cpp, matched bit for bit).
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/vec.cuh"
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

// Elements [0, vec_end) go 8 at a time (16-byte loads; 0 unless x is 16-byte aligned), the rest
// one by one: each thread's first index, and the grid's stride, in elements.
__device__ inline int64_t vec8_end(const void* x, int64_t n) {
  return aligned16(x) ? n / 8 * 8 : 0;
}

// partials[block] = max |x| over the block's grid-stride share (NaN skipped, as fmaxf does; the
// max of a set does not depend on the order, so the 8-wide reads change no bit).
__global__ void amax_partials_kernel(float* partials, const uint16_t* x, int64_t n) {
  __shared__ float red[32];
  float m = 0.0f;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, vec_end = vec8_end(x, n);
  for (int64_t i = first * 8; i < vec_end; i += stride * 8) {
    uint32_t w[4];
    load16(w, x + i);
    for (const uint32_t pair : w) m = fmaxf(m, fmaxf(fabsf(bf16_lo(pair)), fabsf(bf16_hi(pair))));
  }
  for (int64_t i = vec_end + first; i < n; i += stride) m = fmaxf(m, fabsf(from_bf16_bits(x[i])));
  m = block_reduce(m, red, MaxOp{}, 0.0f);
  if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// 448 / amax, or `fallback` when amax is 0 or not finite (cpu::fp8_push_amax's rule).
__device__ inline float scale_for(float amax, float fallback) {
  return amax > 0.0f && amax < INFINITY ? kFp8E4m3Max / amax : fallback;
}

// One block: *amax is raised to the max of the partials (fmaxf: a NaN *amax counts as nothing);
// *scale, *descale = the scale that quantizes this call's tensor (the state's, or from this call's
// amax for a fresh state) and its inverse.
__global__ void call_scale_kernel(float* amax, float* scale, float* descale,
                                  const float* tensor_state, const float* partials, int parts) {
  __shared__ float red[32];
  float m = 0.0f;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) m = fmaxf(m, partials[i]);
  m = block_reduce(m, red, MaxOp{}, 0.0f);
  if (threadIdx.x != 0) return;
  *amax = fmaxf(*amax, m);
  const float state_scale = tensor_state[kFp8AmaxHistory];
  const float use = state_scale == 0.0f ? scale_for(m, 1.0f) : state_scale;
  *scale = use;
  *descale = 1.0f / use;
}

// A thread per tensor part: pushes amaxes[i] into part i's history and sets its next scale.
__global__ void push_amaxes_kernel(float* states, const float* amaxes, int64_t parts) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= parts) return;
  float* s = states + i * kFp8TensorFloats;
  for (int k = kFp8AmaxHistory - 1; k > 0; --k) s[k] = s[k - 1];
  s[0] = amaxes[i];
  float top = 0.0f;
  for (int k = 0; k < kFp8AmaxHistory; ++k) top = fmaxf(top, s[k]);
  const float previous = s[kFp8AmaxHistory];
  const float scale = scale_for(top, previous == 0.0f ? 1.0f : previous);
  s[kFp8AmaxHistory] = scale;
  s[kFp8AmaxHistory + 1] = 1.0f / scale;
}

// out = e4m3(x * scale): 8 elements a thread per turn (a 16-byte load, an 8-byte store) where x
// is 16-byte aligned and out 8-byte aligned, the rest one by one.
__global__ void quantize_kernel(uint8_t* out, const uint16_t* x, int64_t n, const float* scale) {
  const float s = *scale;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t vec_end = reinterpret_cast<uintptr_t>(out) % 8 == 0 ? vec8_end(x, n) : 0;
  for (int64_t i = first * 8; i < vec_end; i += stride * 8) {
    uint32_t w[4], q[2] = {0u, 0u};
    load16(w, x + i);
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = e4m3_bits(bf16_lo(w[k]) * s), hi = e4m3_bits(bf16_hi(w[k]) * s);
      q[k / 2] |= (lo | hi << 8) << (16 * (k % 2));
    }
    store8(out + i, q);
  }
  for (int64_t i = vec_end + first; i < n; i += stride)
    out[i] = e4m3_bits(from_bf16_bits(x[i]) * s);
}

}  // namespace

void fp8_quantize_delayed(uint8_t* out, const uint16_t* x, int64_t n, const float* tensor_state,
                          float* amax, float* scale, float* descale, float* partials,
                          cudaStream_t stream) {
  launch(amax_partials_kernel, kReducePartials, kThreads, stream, partials, x, n);
  CUDA_CHECK_LAUNCH("amax_partials_kernel");
  launch(call_scale_kernel, 1, kThreads, stream, amax, scale, descale, tensor_state,
         static_cast<const float*>(partials), kReducePartials);
  CUDA_CHECK_LAUNCH("call_scale_kernel");
  if (n == 0) return;
  launch(quantize_kernel, grid_for((n + 7) / 8), kThreads, stream, out, x, n,
         static_cast<const float*>(scale));
  CUDA_CHECK_LAUNCH("quantize_kernel");
}

void fp8_push_amaxes(float* states, const float* amaxes, int64_t parts, cudaStream_t stream) {
  if (parts == 0) return;
  launch(push_amaxes_kernel, grid_for(parts), kThreads, stream, states, amaxes, parts);
  CUDA_CHECK_LAUNCH("push_amaxes_kernel");
}

}  // namespace trainer::kernels

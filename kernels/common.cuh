#pragma once
// Helpers shared by the kernels: the launch, grid sizes, warp and block reductions.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/bf16.cuh"
#ifndef TRAINER_CUDA_EMULATION
#include "runtime/cuda/cuda_check.h"
#endif

// Unrolls the next loop fully on the device, so that register arrays indexed by its variable stay
// in registers where the compiler would not unroll a long body by itself; nothing in the cpu
// emulation.
#ifdef __CUDACC__
#define TRAINER_UNROLL _Pragma("unroll")
#else
#define TRAINER_UNROLL
#endif

namespace trainer::kernels {

inline constexpr int kThreads = 256;

// kernel<<<grid, block, 0, stream>>>(args...), spelled once for nvcc and for the cpu emulation
// that runs these kernels in tests/unit/kernels (tests/unit/kernels/cuda_emulation.h).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
#ifdef TRAINER_CUDA_EMULATION
  (void)stream;
  ::cuda_emulation::launch(grid, block, [&] { kernel(args...); });
#else
  // clang-format off
  kernel<<<grid, block, 0, stream>>>(args...);
  // clang-format on
#endif
}

// `bytes` bytes at p set to zero in stream order: cudaMemsetAsync, or in the cpu emulation (where
// launches run at once, in order) a plain memset.
inline void zero_bytes(void* p, size_t bytes, cudaStream_t stream) {
#ifdef TRAINER_CUDA_EMULATION
  (void)stream;
  std::memset(p, 0, bytes);
#else
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
#endif
}

inline constexpr float kLog2e = 1.4426950408889634f;
// 2^x on the multi-function unit alone: ex2.approx.ftz.f32 (about 2 ulp; a result below 2^-126
// flushes to zero; 2^-inf = 0). exp2f is ex2.approx without .ftz, which the assembler wraps in a
// fix-up for subnormal results: extra instructions on every score of the attention kernels and
// every logit of the cross-entropy, for probabilities far below anything a bf16 product or an fp32
// sum of them can hold. e^x is exp2_ftz(x * kLog2e), the multiply folded into the caller's fma.
__device__ inline float exp2_ftz(float x) {
#ifdef TRAINER_CUDA_EMULATION
  const float y = std::exp2(x);
  return y < 0x1p-126f ? 0.0f : y;
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 64 ? 65535 * 64 : blocks));
}

template <class T>
__device__ inline T warp_sum(T v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Reduction over a block of up to 1024 threads (blockDim.x a multiple of 32); every thread gets
// the result. `shared` holds 32 values. Fixed order: deterministic.
template <class T, class Op>
__device__ inline T block_reduce(T v, T* shared, Op op, T identity) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

}  // namespace trainer::kernels

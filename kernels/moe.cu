// The mixture of experts' row moves (runtime/cpu/ops_moe.h is the reference): the dispatch
// gather, the weighted combine and the combine weights' gradient. Each output element is
// written by one thread in the reference's order (no atomics): results match the cpu's sums.
#include "kernels/bf16.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace trainer::kernels {
namespace {

__device__ inline float load_value(const float* p, int64_t i) {
  return p[i];
}
__device__ inline float load_value(const uint16_t* p, int64_t i) {
  return from_bf16_bits(p[i]);
}
__device__ inline void store_value(float* p, int64_t i, float v) {
  p[i] = v;
}
__device__ inline void store_value(uint16_t* p, int64_t i, float v) {
  p[i] = bf16_bits(v);
}

template <class OutT, class InT>
__global__ void moe_gather_rows_kernel(OutT* out, const InT* inp, const int32_t* token_of_slot,
                                       const float* scale, int64_t S, int64_t C) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < S * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i / C, c = i % C;
    const int32_t tok = token_of_slot[s];
    const float v = tok < 0 ? 0.0f : (scale ? scale[s] : 1.0f) * load_value(inp, tok * C + c);
    store_value(out, i, v);
  }
}

__global__ void moe_combine_rows_kernel(float* out, const float* inp, const int32_t* slot,
                                        const float* weight, int64_t N, int64_t K, int64_t C) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < N * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    float acc = out[i];
    for (int64_t k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      if (s >= 0) acc += (weight ? weight[n * K + k] : 1.0f) * inp[s * C + c];
    }
    out[i] = acc;
  }
}

// One thread per (token, choice): a dot product over C in column order, as the cpu's.
__global__ void moe_gate_grad_kernel(float* dweight, const float* dout, const float* inp,
                                     const int32_t* slot, int64_t N, int64_t K, int64_t C) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < N * K;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t s = slot[i];
    float dot = 0.0f;
    if (s >= 0)
      for (int64_t c = 0; c < C; ++c) dot += dout[i / K * C + c] * inp[s * C + c];
    dweight[i] = dot;
  }
}

}  // namespace

template <class OutT, class InT>
void moe_gather_rows(OutT* out, const InT* inp, const int32_t* token_of_slot, const float* scale,
                     int64_t S, int64_t C, cudaStream_t stream) {
  if (S * C == 0) return;
  launch(moe_gather_rows_kernel<OutT, InT>, grid_for(S * C), kThreads, stream, out, inp,
         token_of_slot, scale, S, C);
  CUDA_CHECK_LAUNCH("moe_gather_rows_kernel");
}

template void moe_gather_rows<float, float>(float*, const float*, const int32_t*, const float*,
                                            int64_t, int64_t, cudaStream_t);
template void moe_gather_rows<uint16_t, float>(uint16_t*, const float*, const int32_t*,
                                               const float*, int64_t, int64_t, cudaStream_t);
template void moe_gather_rows<uint16_t, uint16_t>(uint16_t*, const uint16_t*, const int32_t*,
                                                  const float*, int64_t, int64_t, cudaStream_t);
template void moe_gather_rows<float, uint16_t>(float*, const uint16_t*, const int32_t*,
                                               const float*, int64_t, int64_t, cudaStream_t);

void moe_combine_rows(float* out, const float* inp, const int32_t* slot, const float* weight,
                      int64_t N, int64_t K, int64_t C, cudaStream_t stream) {
  if (N * C == 0) return;
  launch(moe_combine_rows_kernel, grid_for(N * C), kThreads, stream, out, inp, slot, weight, N, K,
         C);
  CUDA_CHECK_LAUNCH("moe_combine_rows_kernel");
}

void moe_gate_grad(float* dweight, const float* dout, const float* inp, const int32_t* slot,
                   int64_t N, int64_t K, int64_t C, cudaStream_t stream) {
  if (N * K == 0) return;
  launch(moe_gate_grad_kernel, grid_for(N * K), kThreads, stream, dweight, dout, inp, slot, N, K,
         C);
  CUDA_CHECK_LAUNCH("moe_gate_grad_kernel");
}

}  // namespace trainer::kernels

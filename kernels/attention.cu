// Causal self-attention, the reference kernels: att[B,NH,T,T] is materialised exactly as the cpu
// backend keeps it (runtime/cpu/ops_attention.h), so backward reads the saved probabilities.
// One block per query row (b, h, t); no atomics, so results are deterministic.
#include <cmath>

#include "kernels/attention_common.cuh"
#include "kernels/kernels.h"
#include "runtime/core/attention_state.h"

namespace trainer::kernels {
namespace {

struct Dims {
  int64_t T, C, NH, HS;
  float scale;
};

// Row (b, h, t) of the grid: base offsets of q (in qkv), out, and the att row.
struct Row {
  int64_t b, h, t, bh;
  __device__ Row(const Dims& d, int64_t row)
      : b(row / d.T / d.NH), h(row / d.T % d.NH), t(row % d.T), bh(row / d.T) {}
  __device__ int64_t q(const Dims& d, int64_t tt) const {
    return (b * d.T + tt) * 3 * d.C + h * d.HS;
  }
  __device__ int64_t k(const Dims& d, int64_t tt) const { return q(d, tt) + d.C; }
  __device__ int64_t v(const Dims& d, int64_t tt) const { return q(d, tt) + 2 * d.C; }
  __device__ int64_t o(const Dims& d, int64_t tt) const { return (b * d.T + tt) * d.C + h * d.HS; }
};

template <class OutT, class QkvT>
__global__ void attention_forward_kernel(OutT* out, float* att, const QkvT* qkv, Dims d) {
  __shared__ float red[32];
  const Row r(d, blockIdx.x);
  float* a = att + int64_t{blockIdx.x} * d.T;
  const QkvT* q = qkv + r.q(d, r.t);
  float maxv = -INFINITY;
  for (int64_t t2 = threadIdx.x; t2 <= r.t; t2 += blockDim.x) {
    a[t2] = dot(q, qkv + r.k(d, t2), d.HS) * d.scale;
    maxv = fmaxf(maxv, a[t2]);
  }
  maxv = block_reduce(maxv, red, MaxOp{}, -INFINITY);
  float sum = 0;
  for (int64_t t2 = threadIdx.x; t2 <= r.t; t2 += blockDim.x) sum += (a[t2] = expf(a[t2] - maxv));
  const float inv = 1.0f / block_reduce(sum, red, SumOp{}, 0.0f);
  for (int64_t t2 = threadIdx.x; t2 < d.T; t2 += blockDim.x) a[t2] = t2 <= r.t ? a[t2] * inv : 0.0f;
  __syncthreads();  // the whole row of probabilities is needed below
  for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
    float o = 0;
    for (int64_t t2 = 0; t2 <= r.t; ++t2) o += a[t2] * load_in(qkv + r.v(d, t2) + i);
    store_out(out + r.o(d, r.t) + i, o);
  }
}

// Per query row: dpre[t2] = att (datt - <datt, att>) scale, then dq[t] = dpre k.
template <class QkvT, class DqkvT>
__global__ void attention_backward_query_kernel(DqkvT* dqkv, float* dpre, const float* dout,
                                                const QkvT* qkv, const float* att, Dims d) {
  __shared__ float red[32];
  const Row r(d, blockIdx.x);
  const float* a = att + int64_t{blockIdx.x} * d.T;
  float* dp = dpre + int64_t{blockIdx.x} * d.T;
  const float* dy = dout + r.o(d, r.t);
  float local = 0;
  for (int64_t t2 = threadIdx.x; t2 <= r.t; t2 += blockDim.x) {
    dp[t2] = dot(dy, qkv + r.v(d, t2), d.HS);  // datt for now
    local += dp[t2] * a[t2];
  }
  const float datt_dot_att = block_reduce(local, red, SumOp{}, 0.0f);
  for (int64_t t2 = threadIdx.x; t2 <= r.t; t2 += blockDim.x)
    dp[t2] = a[t2] * (dp[t2] - datt_dot_att) * d.scale;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
    float g = 0;
    for (int64_t t2 = 0; t2 <= r.t; ++t2) g += dp[t2] * load_in(qkv + r.k(d, t2) + i);
    store_out(dqkv + r.q(d, r.t) + i, g);
  }
}

// Per key row t2: dk[t2] = sum_{t >= t2} dpre[t, t2] q[t]; dv[t2] = sum_{t >= t2} att[t, t2] dy[t].
template <class QkvT, class DqkvT>
__global__ void attention_backward_key_kernel(DqkvT* dqkv, const float* dpre, const float* dout,
                                              const QkvT* qkv, const float* att, Dims d) {
  const Row r(d, blockIdx.x);  // r.t is the key position t2
  const int64_t rows = r.bh * d.T * d.T;
  for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
    float gk = 0, gv = 0;
    for (int64_t t = r.t; t < d.T; ++t) {
      const int64_t idx = rows + t * d.T + r.t;
      gk += dpre[idx] * load_in(qkv + r.q(d, t) + i);
      gv += att[idx] * dout[r.o(d, t) + i];
    }
    store_out(dqkv + r.k(d, r.t) + i, gk);
    store_out(dqkv + r.v(d, r.t) + i, gv);
  }
}

Dims dims(int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  return Dims{T, C, NH, HS, attention_scale(HS)};
}

}  // namespace

template <class OutT, class QkvT>
void attention_forward(OutT* out, float* att, const QkvT* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream) {
  if (B * T == 0) return;
  const unsigned rows = static_cast<unsigned>(B * NH * T);
  launch(attention_forward_kernel<OutT, QkvT>, rows, threads_for(T), stream, out, att, qkv,
         dims(T, C, NH));
  CUDA_CHECK_LAUNCH("attention_forward_kernel");
}
template void attention_forward(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                cudaStream_t);
template void attention_forward(uint16_t*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                cudaStream_t);
template void attention_forward(uint16_t*, float*, const uint16_t*, int64_t, int64_t, int64_t,
                                int64_t, cudaStream_t);

template <class QkvT, class DqkvT>
void attention_backward(DqkvT* dqkv, const float* dout, const QkvT* qkv, const float* att,
                        float* dpre_scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
                        cudaStream_t stream) {
  if (B * T == 0) return;
  const unsigned rows = static_cast<unsigned>(B * NH * T);
  const Dims d = dims(T, C, NH);
  launch(attention_backward_query_kernel<QkvT, DqkvT>, rows, threads_for(T), stream, dqkv,
         dpre_scratch, dout, qkv, att, d);
  CUDA_CHECK_LAUNCH("attention_backward_query_kernel");
  launch(attention_backward_key_kernel<QkvT, DqkvT>, rows, threads_for(d.HS), stream, dqkv,
         dpre_scratch, dout, qkv, att, d);
  CUDA_CHECK_LAUNCH("attention_backward_key_kernel");
}
template void attention_backward(float*, const float*, const float*, const float*, float*, int64_t,
                                 int64_t, int64_t, int64_t, cudaStream_t);
template void attention_backward(float*, const float*, const uint16_t*, const float*, float*,
                                 int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void attention_backward(uint16_t*, const float*, const uint16_t*, const float*, float*,
                                 int64_t, int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace trainer::kernels

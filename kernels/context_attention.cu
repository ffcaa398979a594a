// Context-parallel attention (Backend::attention_forward_cp), the reference kernels: this rank's
// queries, chunks `rank` and 2cp - 1 - rank of the sequence's 2cp chunks of L tokens (its Tl = 2L
// rows), over the keys of the whole sequence up to each one. Every rank's qkv, gathered in rank
// order ([cp,B,Tl,3C]), is first put in sequence order ([B,T,3C]); att[B,NH,Tl,T] keeps the
// probabilities exactly as the cpu backend does (runtime/cpu/ops_attention.h). One block per
// query row (forward, the query gradients) or key row (the key and value gradients); no atomics,
// so results are deterministic.
#include <cmath>

#include "kernels/attention_common.cuh"
#include "kernels/kernels.h"
#include "runtime/core/attention_state.h"

namespace trainer::kernels {
namespace {

struct CpDims {
  int64_t B, T, Tl, L, C, NH, HS, rank, cp;
  float scale;
  // Sequence position of local row t of cp rank r.
  __device__ int64_t position(int64_t r, int64_t t) const {
    return context_chunk(r, cp, t / L) * L + t % L;
  }
  // qkv of sequence position p of batch b, head h, in sequence order; out and dout of local row t.
  __device__ int64_t q(int64_t b, int64_t h, int64_t p) const {
    return (b * T + p) * 3 * C + h * HS;
  }
  __device__ int64_t o(int64_t b, int64_t h, int64_t t) const { return (b * Tl + t) * C + h * HS; }
};

CpDims cp_dims(int64_t rank, int64_t cp, int64_t B, int64_t Tl, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  return CpDims{B, cp * Tl, Tl, Tl / 2, C, NH, HS, rank, cp, attention_scale(HS)};
}

// Element i of all [cp,B,Tl,width] is element `sequence_index` of seq [B,T,width].
__device__ int64_t sequence_index(const CpDims& d, int64_t i, int64_t width) {
  const int64_t col = i % width, t = i / width % d.Tl, b = i / width / d.Tl % d.B,
                r = i / width / d.Tl / d.B;
  return (b * d.T + d.position(r, t)) * width + col;
}

template <class T>
__global__ void context_to_sequence_kernel(T* seq, const T* all, CpDims d, int64_t width) {
  const int64_t n = d.cp * d.B * d.Tl * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    seq[sequence_index(d, i, width)] = all[i];
}

// dqkv_all from the sequence-order gradient: the key and value columns of every rank's rows, and
// the query columns of this rank's (the other ranks' queries are theirs: zero here).
__global__ void sequence_to_context_grad_kernel(float* all, const float* seq, CpDims d) {
  const int64_t width = 3 * d.C, n = d.cp * d.B * d.Tl * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const bool other_query = i % width < d.C && i / width / d.Tl / d.B != d.rank;
    all[i] = other_query ? 0.0f : seq[sequence_index(d, i, width)];
  }
}

// Local query row (b, h, t) of the grid: (b * NH + h) * Tl + t.
template <class OutT, class QkvT>
__global__ void context_attention_forward_kernel(OutT* out, float* att, const QkvT* seq, CpDims d) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x, t = row % d.Tl, bh = row / d.Tl, b = bh / d.NH, h = bh % d.NH;
  const int64_t pos = d.position(d.rank, t);
  float* a = att + row * d.T;
  const QkvT* q = seq + d.q(b, h, pos);
  float maxv = -INFINITY;
  for (int64_t t2 = threadIdx.x; t2 <= pos; t2 += blockDim.x) {
    a[t2] = dot(q, seq + d.q(b, h, t2) + d.C, d.HS) * d.scale;
    maxv = fmaxf(maxv, a[t2]);
  }
  maxv = block_reduce(maxv, red, MaxOp{}, -INFINITY);
  float sum = 0;
  for (int64_t t2 = threadIdx.x; t2 <= pos; t2 += blockDim.x) sum += (a[t2] = expf(a[t2] - maxv));
  const float inv = 1.0f / block_reduce(sum, red, SumOp{}, 0.0f);
  for (int64_t t2 = threadIdx.x; t2 < d.T; t2 += blockDim.x) a[t2] = t2 <= pos ? a[t2] * inv : 0.0f;
  __syncthreads();  // the whole row of probabilities is needed below
  for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
    float o = 0;
    for (int64_t t2 = 0; t2 <= pos; ++t2) o += a[t2] * load_in(seq + d.q(b, h, t2) + 2 * d.C + i);
    store_out(out + d.o(b, h, t) + i, o);
  }
}

// Per local query row: dpre[t2] = att (datt - <datt, att>) scale, then dq = dpre k into dseq.
template <class QkvT>
__global__ void context_attention_backward_query_kernel(float* dseq, float* dpre, const float* dout,
                                                        const QkvT* seq, const float* att,
                                                        CpDims d) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x, t = row % d.Tl, bh = row / d.Tl, b = bh / d.NH, h = bh % d.NH;
  const int64_t pos = d.position(d.rank, t);
  const float* a = att + row * d.T;
  float* dp = dpre + row * d.T;
  const float* dy = dout + d.o(b, h, t);
  float local = 0;
  for (int64_t t2 = threadIdx.x; t2 <= pos; t2 += blockDim.x) {
    dp[t2] = dot(dy, seq + d.q(b, h, t2) + 2 * d.C, d.HS);  // datt for now
    local += dp[t2] * a[t2];
  }
  const float datt_dot_att = block_reduce(local, red, SumOp{}, 0.0f);
  for (int64_t t2 = threadIdx.x; t2 <= pos; t2 += blockDim.x)
    dp[t2] = a[t2] * (dp[t2] - datt_dot_att) * d.scale;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
    float g = 0;
    for (int64_t t2 = 0; t2 <= pos; ++t2) g += dp[t2] * load_in(seq + d.q(b, h, t2) + d.C + i);
    dseq[d.q(b, h, pos) + i] = g;
  }
}

// Per key row (b, h, t2) of the sequence: dk[t2] = sum over this rank's queries t at or after t2
// of dpre[t, t2] q[t], dv[t2] = sum of att[t, t2] dout[t], into dseq (zero where none sees t2).
template <class QkvT>
__global__ void context_attention_backward_key_kernel(float* dseq, const float* dpre,
                                                      const float* dout, const QkvT* seq,
                                                      const float* att, CpDims d) {
  const int64_t t2 = blockIdx.x % d.T, bh = blockIdx.x / d.T, b = bh / d.NH, h = bh % d.NH;
  for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
    float gk = 0, gv = 0;
    for (int64_t t = 0; t < d.Tl; ++t) {
      const int64_t pos = d.position(d.rank, t);
      if (pos < t2) continue;
      const int64_t idx = (bh * d.Tl + t) * d.T + t2;
      gk += dpre[idx] * load_in(seq + d.q(b, h, pos) + i);
      gv += att[idx] * dout[d.o(b, h, t) + i];
    }
    dseq[d.q(b, h, t2) + d.C + i] = gk;
    dseq[d.q(b, h, t2) + 2 * d.C + i] = gv;
  }
}

}  // namespace

template <class T>
void context_to_sequence(T* seq, const T* all, int64_t cp, int64_t B, int64_t Tl, int64_t width,
                         cudaStream_t stream) {
  const int64_t n = cp * B * Tl * width;
  if (n == 0) return;
  launch(context_to_sequence_kernel<T>, grid_for(n), kThreads, stream, seq, all,
         cp_dims(0, cp, B, Tl, 1, 1), width);
  CUDA_CHECK_LAUNCH("context_to_sequence_kernel");
}
template void context_to_sequence(float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                  cudaStream_t);
template void context_to_sequence(uint16_t*, const uint16_t*, int64_t, int64_t, int64_t, int64_t,
                                  cudaStream_t);

template <class OutT, class QkvT>
void context_attention_forward(OutT* out, float* att, const QkvT* seq, int64_t rank, int64_t cp,
                               int64_t B, int64_t Tl, int64_t C, int64_t NH, cudaStream_t stream) {
  if (B * Tl == 0) return;
  const CpDims d = cp_dims(rank, cp, B, Tl, C, NH);
  launch(context_attention_forward_kernel<OutT, QkvT>, static_cast<unsigned>(B * NH * Tl),
         threads_for(d.T), stream, out, att, seq, d);
  CUDA_CHECK_LAUNCH("context_attention_forward_kernel");
}
template void context_attention_forward(float*, float*, const float*, int64_t, int64_t, int64_t,
                                        int64_t, int64_t, int64_t, cudaStream_t);
template void context_attention_forward(uint16_t*, float*, const float*, int64_t, int64_t, int64_t,
                                        int64_t, int64_t, int64_t, cudaStream_t);
template void context_attention_forward(uint16_t*, float*, const uint16_t*, int64_t, int64_t,
                                        int64_t, int64_t, int64_t, int64_t, cudaStream_t);

void context_grad_from_sequence(float* dqkv_all, const float* dseq, int64_t rank, int64_t cp,
                                int64_t B, int64_t Tl, int64_t C, cudaStream_t stream) {
  const int64_t n = cp * B * Tl * 3 * C;
  if (n == 0) return;
  launch(sequence_to_context_grad_kernel, grid_for(n), kThreads, stream, dqkv_all, dseq,
         cp_dims(rank, cp, B, Tl, C, 1));
  CUDA_CHECK_LAUNCH("sequence_to_context_grad_kernel");
}

template <class QkvT>
void context_attention_backward(float* dqkv_all, float* dseq_scratch, float* dpre_scratch,
                                const float* dout, const QkvT* seq, const float* att, int64_t rank,
                                int64_t cp, int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                cudaStream_t stream) {
  if (B * Tl == 0) return;
  const CpDims d = cp_dims(rank, cp, B, Tl, C, NH);
  launch(context_attention_backward_query_kernel<QkvT>, static_cast<unsigned>(B * NH * Tl),
         threads_for(d.T), stream, dseq_scratch, dpre_scratch, dout, seq, att, d);
  CUDA_CHECK_LAUNCH("context_attention_backward_query_kernel");
  launch(context_attention_backward_key_kernel<QkvT>, static_cast<unsigned>(B * NH * d.T),
         threads_for(d.HS), stream, dseq_scratch, dpre_scratch, dout, seq, att, d);
  CUDA_CHECK_LAUNCH("context_attention_backward_key_kernel");
  context_grad_from_sequence(dqkv_all, dseq_scratch, rank, cp, B, Tl, C, stream);
}
template void context_attention_backward(float*, float*, float*, const float*, const float*,
                                         const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                         int64_t, cudaStream_t);
template void context_attention_backward(float*, float*, float*, const float*, const uint16_t*,
                                         const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                         int64_t, cudaStream_t);

}  // namespace trainer::kernels

// Causal self-attention, FlashAttention-style (Dao et al.; FlashAttention-2's loop order): the
// T x T matrix never exists. Forward streams key/value tiles through shared memory with an online
// softmax and keeps each row's log-sum-exp; backward recomputes the probabilities tile by tile
// from it. fp32 math on CUDA cores; head sizes 16, 32, 64, 80, 96 and 128 (others use
// attention.cu). Above 64 a thread's rows of q, o (and dout, dq) pass its registers and spill:
// this is the fallback for an fp32 output, where the tensor-core kernels do not run.
//
// Deterministic: every output element is written by one thread, in a fixed order, without
// atomics. dq (one thread per query row) and dk/dv (one thread per key row) are two kernels, so
// the probabilities are recomputed twice in backward instead of summing dq with atomics.
//
// The same kernels run context parallelism's attention (flash_context_attention_*): a cp rank's
// query rows are two chunks of the sequence (QueryRows), over the keys of the whole sequence
// gathered in sequence order, so that no rank keeps a Tl x T matrix either.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/attention_common.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "runtime/core/attention_state.h"

namespace trainer::kernels {
namespace {

// nvcc unrolls these loops (register arrays need constant indices); a host compiler may not.
#ifdef __CUDACC__
#define TRAINER_UNROLL _Pragma("unroll")
#else
#define TRAINER_UNROLL
#endif

// Rows per block (one thread each) and keys per shared tile: 16 above head size 64, where 32 rows
// of the dk/dv kernel's four tiles would pass the 48 KB of static shared memory at 128.
template <int HS>
constexpr int kTileOf = HS > 64 ? 16 : 32;

// Rows [t0, t0 + kTile) of k and v (zeros past T) into shared tiles.
template <int HS, class QkvT, int kTile = kTileOf<HS>>
__device__ void load_kv_tile(float (*ks)[HS], float (*vs)[HS], const AttentionHead<HS, QkvT>& hd,
                             int64_t t0) {
  for (int e = threadIdx.x; e < kTile * HS; e += blockDim.x) {
    const int j = e / HS, d = e % HS;
    const int64_t t = t0 + j;
    ks[j][d] = t < hd.T ? load_in(hd.k(t) + d) : 0.0f;
    vs[j][d] = t < hd.T ? load_in(hd.v(t) + d) : 0.0f;
  }
}

template <int HS, class OutT, class QkvT>
__global__ void __launch_bounds__(kTileOf<HS>)
    flash_forward_kernel(OutT* out, float* lse, const QkvT* qkv, int64_t T, int64_t C, int64_t NH,
                         float scale, QueryRows qr) {
  constexpr int kTile = kTileOf<HS>;
  __shared__ __align__(16) float ks[kTile][HS];
  __shared__ __align__(16) float vs[kTile][HS];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int64_t q0 = int64_t{blockIdx.y} * kTile, i = q0 + threadIdx.x;
  const bool row = i < qr.rows;
  const int64_t p = row ? qr.position(i) : 0;
  float q[HS], o[HS];
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) q[d] = row ? load_in(hd.q(p) + d) : 0.0f, o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  // causal: no key past the tile's last row's position
  const int64_t key_end = qr.position((q0 + kTile < qr.rows ? q0 + kTile : qr.rows) - 1) + 1;
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();  // every thread is done with the previous tile
    load_kv_tile<HS, QkvT>(ks, vs, hd, k0);
    __syncthreads();
    if (!row || k0 > p) continue;
    const int64_t n = p - k0 + 1;  // keys k0..p of this tile are visible to row i
    float s[kTile];
    float tile_max = -INFINITY;
    TRAINER_UNROLL
    for (int j = 0; j < kTile; ++j) {
      float dot = 0.0f;
      TRAINER_UNROLL
      for (int d = 0; d < HS; ++d) dot += q[d] * ks[j][d];
      s[j] = j < n ? dot * scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    const float alpha = expf(m - m_new);  // 0 on the first tile, where m = -inf
    l *= alpha;
    TRAINER_UNROLL
    for (int d = 0; d < HS; ++d) o[d] *= alpha;
    TRAINER_UNROLL
    for (int j = 0; j < kTile; ++j) {
      const float p = expf(s[j] - m_new);  // 0 for the masked keys
      l += p;
      TRAINER_UNROLL
      for (int d = 0; d < HS; ++d) o[d] += p * vs[j][d];
    }
    m = m_new;
  }
  if (!row) return;
  const float inv = 1.0f / l;
  OutT* y = out + qr.o(hd, i);
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) store_out(y + d, o[d] * inv);
  lse[bh * qr.rows + i] = m + logf(l);
}

// One thread per query row i: D_i = <dout_i, out_i> (kept for the dk/dv kernel) and
// dq_i = scale * sum_j p_ij (dp_ij - D_i) k_j with p_ij = exp(s_ij - lse_i), dp_ij = <dout_i,
// v_j>.
template <int HS, class OutT, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kTileOf<HS>)
    flash_backward_dq_kernel(DqkvT* dqkv, float* dsum, const float* dout, const QkvT* qkv,
                             const OutT* out, const float* lse, int64_t T, int64_t C, int64_t NH,
                             float scale, QueryRows qr) {
  constexpr int kTile = kTileOf<HS>;
  __shared__ __align__(16) float ks[kTile][HS];
  __shared__ __align__(16) float vs[kTile][HS];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int64_t q0 = int64_t{blockIdx.y} * kTile, i = q0 + threadIdx.x;
  const bool row = i < qr.rows;
  const int64_t p = row ? qr.position(i) : 0, oi = qr.o(hd, i);
  float q[HS], dy[HS], dq[HS];
  float D = 0.0f;
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) {
    q[d] = row ? load_in(hd.q(p) + d) : 0.0f;
    dy[d] = row ? dout[oi + d] : 0.0f;
    D += row ? dy[d] * load_in(out + oi + d) : 0.0f;
    dq[d] = 0.0f;
  }
  const float L = row ? lse[bh * qr.rows + i] : 0.0f;
  if (row) dsum[bh * qr.rows + i] = D;
  const int64_t key_end = qr.position((q0 + kTile < qr.rows ? q0 + kTile : qr.rows) - 1) + 1;
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();
    load_kv_tile<HS, QkvT>(ks, vs, hd, k0);
    __syncthreads();
    if (!row || k0 > p) continue;
    const int64_t n = p - k0 + 1 < kTile ? p - k0 + 1 : kTile;
    for (int j = 0; j < n; ++j) {
      float s = 0.0f, dp = 0.0f;
      TRAINER_UNROLL
      for (int d = 0; d < HS; ++d) s += q[d] * ks[j][d], dp += dy[d] * vs[j][d];
      const float ds = expf(s * scale - L) * (dp - D) * scale;
      TRAINER_UNROLL
      for (int d = 0; d < HS; ++d) dq[d] += ds * ks[j][d];
    }
  }
  if (!row) return;
  DqkvT* g = dqkv + (hd.q(p) - qkv);
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) store_out(g + d, dq[d]);
}

// One thread per key row j: dv_j = sum_i p_ij dout_i and dk_j = scale * sum_i ds_ij q_i over the
// query rows i at positions >= j. The thread's own k_j and v_j sit in padded shared rows (no bank
// conflicts); the query tile is read by all threads at the same address (a broadcast). A key no
// query row sees (context parallelism: past this rank's last position) gets zeros.
template <int HS, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kTileOf<HS>)
    flash_backward_dkdv_kernel(DqkvT* dqkv, const float* dsum, const float* dout, const QkvT* qkv,
                               const float* lse, int64_t T, int64_t C, int64_t NH, float scale,
                               QueryRows qr) {
  constexpr int kTile = kTileOf<HS>;
  __shared__ __align__(16) float qs[kTile][HS];
  __shared__ __align__(16) float dys[kTile][HS];
  __shared__ float kown[kTile][HS + 1], vown[kTile][HS + 1];
  __shared__ float ls[kTile], ds_row[kTile];
  __shared__ int64_t pos[kTile];  // the query tile's positions (-1 past the last row)
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int64_t k0 = int64_t{blockIdx.y} * kTile, j = k0 + threadIdx.x;
  const bool key = j < T;
  for (int e = threadIdx.x; e < kTile * HS; e += blockDim.x) {
    const int r = e / HS, d = e % HS;
    const int64_t t = k0 + r;
    kown[r][d] = t < T ? load_in(hd.k(t) + d) : 0.0f;
    vown[r][d] = t < T ? load_in(hd.v(t) + d) : 0.0f;
  }
  float dk[HS], dv[HS];
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) dk[d] = 0.0f, dv[d] = 0.0f;
  const float* kj = kown[threadIdx.x];
  const float* vj = vown[threadIdx.x];
  // causal: queries at positions before k0 never see these keys
  for (int64_t i0 = qr.first_row_at(k0); i0 < qr.rows; i0 += kTile) {
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * HS; e += blockDim.x) {
      const int r = e / HS, d = e % HS;
      const int64_t t = i0 + r;
      qs[r][d] = t < qr.rows ? load_in(hd.q(qr.position(t)) + d) : 0.0f;
      dys[r][d] = t < qr.rows ? dout[qr.o(hd, t) + d] : 0.0f;
    }
    if (threadIdx.x < kTile) {
      const int64_t t = i0 + threadIdx.x;
      const bool in = t < qr.rows;
      ls[threadIdx.x] = in ? lse[bh * qr.rows + t] : 0.0f;
      ds_row[threadIdx.x] = in ? dsum[bh * qr.rows + t] : 0.0f;
      pos[threadIdx.x] = in ? qr.position(t) : -1;
    }
    __syncthreads();
    if (!key) continue;
    const int64_t last = qr.rows - i0 < kTile ? qr.rows - i0 : kTile;
    for (int64_t r = 0; r < last; ++r) {
      if (pos[r] < j) continue;  // rows at positions >= j only
      float s = 0.0f, dp = 0.0f;
      TRAINER_UNROLL
      for (int d = 0; d < HS; ++d) s += qs[r][d] * kj[d], dp += dys[r][d] * vj[d];
      const float p = expf(s * scale - ls[r]);
      const float ds = p * (dp - ds_row[r]) * scale;
      TRAINER_UNROLL
      for (int d = 0; d < HS; ++d) dv[d] += p * dys[r][d], dk[d] += ds * qs[r][d];
    }
  }
  if (!key) return;
  DqkvT* gk = dqkv + (hd.k(j) - qkv);
  DqkvT* gv = dqkv + (hd.v(j) - qkv);
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) store_out(gk + d, dk[d]), store_out(gv + d, dv[d]);
}

// The head sizes below (with_head_size<16, 32, 64, 80, 96, 128>) are the rule the backend and
// `trainer plan` follow (kFlashHeadSizes).
static_assert(kFlashHeadSizes.size() == 6 && flash_attention_head_size(16) &&
              flash_attention_head_size(32) && flash_attention_head_size(64) &&
              flash_attention_head_size(80) && flash_attention_head_size(96) &&
              flash_attention_head_size(128));

}  // namespace

template <class OutT, class QkvT>
void flash_attention_forward(OutT* out, float* lse, const QkvT* qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, cudaStream_t stream) {
  if (B * T == 0) return;
  with_head_size<16, 32, 64, 80, 96, 128>(C / NH, "flash attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value, kTile = kTileOf<HS>;
    launch(flash_forward_kernel<HS, OutT, QkvT>, attention_grid(B, T, NH, kTile), kTile, stream,
           out, lse, qkv, T, C, NH, attention_scale(HS), whole_sequence(T));
    CUDA_CHECK_LAUNCH("flash_forward_kernel");
  });
}

template <class OutT, class QkvT, class DqkvT>
void flash_attention_backward(DqkvT* dqkv, float* dsum_scratch, const float* dout, const QkvT* qkv,
                              const OutT* out, const float* lse, int64_t B, int64_t T, int64_t C,
                              int64_t NH, cudaStream_t stream) {
  if (B * T == 0) return;
  with_head_size<16, 32, 64, 80, 96, 128>(C / NH, "flash attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value, kTile = kTileOf<HS>;
    launch(flash_backward_dq_kernel<HS, OutT, QkvT, DqkvT>, attention_grid(B, T, NH, kTile), kTile,
           stream, dqkv, dsum_scratch, dout, qkv, out, lse, T, C, NH, attention_scale(HS),
           whole_sequence(T));
    CUDA_CHECK_LAUNCH("flash_backward_dq_kernel");
    launch(flash_backward_dkdv_kernel<HS, QkvT, DqkvT>, attention_grid(B, T, NH, kTile), kTile,
           stream, dqkv, dsum_scratch, dout, qkv, lse, T, C, NH, attention_scale(HS),
           whole_sequence(T));
    CUDA_CHECK_LAUNCH("flash_backward_dkdv_kernel");
  });
}

template <class OutT, class QkvT>
void flash_context_attention_forward(OutT* out, float* lse, const QkvT* seq, int64_t rank,
                                     int64_t cp, int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                     cudaStream_t stream) {
  if (B * Tl == 0) return;
  with_head_size<16, 32, 64, 80, 96, 128>(C / NH, "flash attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value, kTile = kTileOf<HS>;
    launch(flash_forward_kernel<HS, OutT, QkvT>, attention_grid(B, Tl, NH, kTile), kTile, stream,
           out, lse, seq, cp * Tl, C, NH, attention_scale(HS), context_rows(rank, cp, Tl));
    CUDA_CHECK_LAUNCH("flash_forward_kernel (context parallel)");
  });
}

template <class OutT, class QkvT>
void flash_context_attention_backward(float* dseq, float* dsum_scratch, const float* dout,
                                      const QkvT* seq, const OutT* out, const float* lse,
                                      int64_t rank, int64_t cp, int64_t B, int64_t Tl, int64_t C,
                                      int64_t NH, cudaStream_t stream) {
  if (B * Tl == 0) return;
  const int64_t T = cp * Tl;
  with_head_size<16, 32, 64, 80, 96, 128>(C / NH, "flash attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value, kTile = kTileOf<HS>;
    const QueryRows rows = context_rows(rank, cp, Tl);
    launch(flash_backward_dq_kernel<HS, OutT, QkvT, float>, attention_grid(B, Tl, NH, kTile), kTile,
           stream, dseq, dsum_scratch, dout, seq, out, lse, T, C, NH, attention_scale(HS), rows);
    CUDA_CHECK_LAUNCH("flash_backward_dq_kernel (context parallel)");
    launch(flash_backward_dkdv_kernel<HS, QkvT, float>, attention_grid(B, T, NH, kTile), kTile,
           stream, dseq, dsum_scratch, dout, seq, lse, T, C, NH, attention_scale(HS), rows);
    CUDA_CHECK_LAUNCH("flash_backward_dkdv_kernel (context parallel)");
  });
}

template void flash_attention_forward(float*, float*, const float*, int64_t, int64_t, int64_t,
                                      int64_t, cudaStream_t);
template void flash_attention_forward(uint16_t*, float*, const float*, int64_t, int64_t, int64_t,
                                      int64_t, cudaStream_t);
template void flash_attention_backward(float*, float*, const float*, const float*, const float*,
                                       const float*, int64_t, int64_t, int64_t, int64_t,
                                       cudaStream_t);
template void flash_attention_backward(float*, float*, const float*, const float*, const uint16_t*,
                                       const float*, int64_t, int64_t, int64_t, int64_t,
                                       cudaStream_t);
// bf16 compute with bf16 qkv
template void flash_attention_forward(uint16_t*, float*, const uint16_t*, int64_t, int64_t, int64_t,
                                      int64_t, cudaStream_t);
template void flash_attention_backward(float*, float*, const float*, const uint16_t*,
                                       const uint16_t*, const float*, int64_t, int64_t, int64_t,
                                       int64_t, cudaStream_t);
template void flash_attention_backward(uint16_t*, float*, const float*, const uint16_t*,
                                       const uint16_t*, const float*, int64_t, int64_t, int64_t,
                                       int64_t, cudaStream_t);

// context parallelism: fp32; bf16 out from fp32 or bf16 qkv (dseq always fp32)
template void flash_context_attention_forward(float*, float*, const float*, int64_t, int64_t,
                                              int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void flash_context_attention_forward(uint16_t*, float*, const float*, int64_t, int64_t,
                                              int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void flash_context_attention_forward(uint16_t*, float*, const uint16_t*, int64_t, int64_t,
                                              int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void flash_context_attention_backward(float*, float*, const float*, const float*,
                                               const float*, const float*, int64_t, int64_t,
                                               int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void flash_context_attention_backward(float*, float*, const float*, const float*,
                                               const uint16_t*, const float*, int64_t, int64_t,
                                               int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void flash_context_attention_backward(float*, float*, const float*, const uint16_t*,
                                               const uint16_t*, const float*, int64_t, int64_t,
                                               int64_t, int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace trainer::kernels

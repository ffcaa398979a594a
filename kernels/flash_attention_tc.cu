// Causal self-attention on tensor cores for bf16 compute: the FlashAttention-2 algorithm of
// flash_attention.cu with its matrix products as bf16 WMMA tiles (16x16x16, fp32 accumulation).
// q (pre-scaled by 1/sqrt(HS)), k, v, the probabilities P, dout and dS are rounded to bf16 for
// the products; softmax statistics and sums stay fp32, and each output is rounded once from
// them (out and dqkv may be bf16). Head sizes 32 and 64.
//
// A block is 4 warps; each warp owns 16 rows (queries in forward and dq, keys in dk/dv) and
// walks 32-wide tiles of the other side through shared memory. Per-row softmax work happens in
// shared memory, two lanes per row. Deterministic like flash_attention.cu: no atomics, dq and
// dk/dv from two kernels.
#ifndef TRAINER_CUDA_EMULATION
#include <cuda_bf16.h>
#include <mma.h>
#endif

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

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kWarps = 4;
constexpr int kThreadsTc = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // rows a block owns
constexpr int kCols = 32;           // width of the tiles it walks

// rows x HS of src(t)[d] * mul for t = t0 + row (zeros past T) into dst[row][d] as bf16.
template <int HS, class Src>
__device__ void load_rows(bf16* dst, int rows, int64_t t0, int64_t T, Src src, float mul) {
  for (int e = threadIdx.x; e < rows * HS; e += blockDim.x) {
    const int r = e / HS, d = e % HS;
    const int64_t t = t0 + r;
    dst[r * HS + d] = __float2bfloat16(t < T ? load_in(src(t) + d) * mul : 0.0f);
  }
}

// C[16 x 16n..] = A (16 x K, row-major bf16 at a, ld lda) * B for the kN 16-wide column tiles,
// stored to out (fp32, ld ldo). B is [K x N] given either row-major (b[k][n]) or as the rows of
// its transpose (bt[n][k], i.e. column-major).
template <int K, int kN, bool kBTransposed>
__device__ void warp_gemm_store(float* out, int ldo, const bf16* a, int lda, const bf16* b,
                                int ldb) {
  for (int n = 0; n < kN; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K / 16; ++k) {
      FragA fa;
      wmma::load_matrix_sync(fa, a + k * 16, lda);
      if constexpr (kBTransposed) {
        FragBCol fb;
        wmma::load_matrix_sync(fb, b + n * 16 * ldb + k * 16, ldb);
        wmma::mma_sync(acc, fa, fb, acc);
      } else {
        FragBRow fb;
        wmma::load_matrix_sync(fb, b + k * 16 * ldb + n * 16, ldb);
        wmma::mma_sync(acc, fa, fb, acc);
      }
    }
    wmma::store_matrix_sync(out + n * 16, acc, ldo, wmma::mem_row_major);
  }
}

// acc[n] += A (16 x kCols bf16, ld kCols) * B (kCols x HS bf16 row-major, ld HS), n over HS/16.
template <int HS>
__device__ void warp_accumulate(FragC* acc, const bf16* a, const bf16* b) {
  for (int n = 0; n < HS / 16; ++n)
    for (int k = 0; k < kCols / 16; ++k) {
      FragA fa;
      FragBRow fb;
      wmma::load_matrix_sync(fa, a + k * 16, kCols);
      wmma::load_matrix_sync(fb, b + k * 16 * HS + n * 16, HS);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
}

// g[d] = row r of the warp's 16 x HS accumulator tiles (through `stage`, 16 x HS floats of
// shared memory), two lanes per row; g == nullptr: a row past T. Ends with the warp synced, so
// `stage` may be reused.
template <int HS, class DqkvT>
__device__ void store_rows(DqkvT* g, const FragC (&acc)[HS / 16], float* stage, int r, int half) {
  for (int n = 0; n < HS / 16; ++n)
    wmma::store_matrix_sync(stage + n * 16, acc[n], HS, wmma::mem_row_major);
  __syncwarp();
  if (g)
    for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d)
      store_out(g + d, stage[r * HS + d]);
  __syncwarp();
}

// ---- forward: one block per (64 queries, b*h); O and the row statistics live in shared memory.
template <int HS, class OutT, class QkvT>
__global__ void __launch_bounds__(kThreadsTc)
    tc_forward_kernel(OutT* out, float* lse, const QkvT* qkv, int64_t T, int64_t C, int64_t NH,
                      float scale) {
  __shared__ __align__(32) bf16 qs[kRows * HS];
  __shared__ __align__(32) bf16 ks[kCols * HS];
  __shared__ __align__(32) bf16 vs[kCols * HS];
  __shared__ __align__(32) float ss[kWarps][16 * kCols];
  __shared__ __align__(32) bf16 ps[kWarps][16 * kCols];
  __shared__ __align__(32) float os[kWarps][16 * HS];
  __shared__ float row_m[kWarps][16], row_l[kWarps][16];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;  // this lane's row of the warp and half of its columns
  const int64_t q0 = int64_t{blockIdx.y} * kRows, wq0 = q0 + 16 * warp, i = wq0 + r;

  load_rows<HS>(
      qs, kRows, q0, T, [&](int64_t t) { return hd.q(t); }, scale);
  for (int d = lane; d < 16 * HS; d += 32) os[warp][d] = 0.0f;
  if (half == 0) row_m[warp][r] = -INFINITY, row_l[warp][r] = 0.0f;
  const int64_t key_end = q0 + kRows < T ? q0 + kRows : T;
  for (int64_t k0 = 0; k0 < key_end; k0 += kCols) {
    __syncthreads();  // the previous tile is no longer read
    load_rows<HS>(
        ks, kCols, k0, T, [&](int64_t t) { return hd.k(t); }, 1.0f);
    load_rows<HS>(
        vs, kCols, k0, T, [&](int64_t t) { return hd.v(t); }, 1.0f);
    __syncthreads();
    if (k0 > wq0 + 15) continue;  // every key of the tile is after every row of this warp
    warp_gemm_store<HS, kCols / 16, true>(ss[warp], kCols, qs + 16 * warp * HS, HS, ks, HS);
    __syncwarp();
    // Online softmax of row r over this tile: two lanes, 16 columns each.
    const float m_old = row_m[warp][r];
    float tile_max = -INFINITY;
    for (int j = half * 16; j < half * 16 + 16; ++j)
      if (k0 + j <= i && i < T) tile_max = fmaxf(tile_max, ss[warp][r * kCols + j]);
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m_old, tile_max);
    const bool any = m_new != -INFINITY;  // false only for rows past T
    const float alpha = any ? expf(m_old - m_new) : 1.0f;
    float sum = 0.0f;
    for (int j = half * 16; j < half * 16 + 16; ++j) {
      const bool visible = k0 + j <= i && i < T;
      const bf16 p = __float2bfloat16(visible ? expf(ss[warp][r * kCols + j] - m_new) : 0.0f);
      ps[warp][r * kCols + j] = p;
      sum += __bfloat162float(p);  // the normaliser sums what the product P V uses
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d) os[warp][r * HS + d] *= alpha;
    __syncwarp();
    if (half == 0) row_m[warp][r] = m_new, row_l[warp][r] = row_l[warp][r] * alpha + sum;
    // O += P V
    FragC acc[HS / 16];
    for (int n = 0; n < HS / 16; ++n)
      wmma::load_matrix_sync(acc[n], os[warp] + n * 16, HS, wmma::mem_row_major);
    warp_accumulate<HS>(acc, ps[warp], vs);
    for (int n = 0; n < HS / 16; ++n)
      wmma::store_matrix_sync(os[warp] + n * 16, acc[n], HS, wmma::mem_row_major);
    __syncwarp();
  }
  __syncwarp();
  if (i >= T) return;
  const float l = row_l[warp][r], inv = 1.0f / l;
  OutT* y = out + hd.o(i);
  for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d)
    store_out(y + d, os[warp][r * HS + d] * inv);
  if (half == 0) lse[bh * T + i] = row_m[warp][r] + logf(l);
}

// ---- dq: one block per (64 queries, b*h). D_i = <dout_i, out_i> is written for dk/dv.
template <int HS, class OutT, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kThreadsTc)
    tc_backward_dq_kernel(DqkvT* dqkv, float* dsum, const float* dout, const QkvT* qkv,
                          const OutT* out, const float* lse, int64_t T, int64_t C, int64_t NH,
                          float scale) {
  // q and dout rows (bf16), then the fp32 dq staging of each warp: the same bytes.
  __shared__ __align__(32) unsigned char qdo[2 * kRows * HS * 2];
  bf16* qs = reinterpret_cast<bf16*>(qdo);
  bf16* dos = qs + kRows * HS;
  __shared__ __align__(32) bf16 ks[kCols * HS];
  __shared__ __align__(32) bf16 vs[kCols * HS];
  __shared__ __align__(32) float ss[kWarps][16 * kCols];
  __shared__ __align__(32) float dps[kWarps][16 * kCols];
  __shared__ __align__(32) bf16 dss[kWarps][16 * kCols];
  __shared__ float row_lse[kWarps][16], row_d[kWarps][16];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int64_t q0 = int64_t{blockIdx.y} * kRows, wq0 = q0 + 16 * warp, i = wq0 + r;

  load_rows<HS>(
      qs, kRows, q0, T, [&](int64_t t) { return hd.q(t); }, scale);
  load_rows<HS>(
      dos, kRows, q0, T, [&](int64_t t) { return dout + hd.o(t); }, 1.0f);
  float D = 0.0f;
  if (i < T)
    for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); ++d)
      D += dout[hd.o(i) + d] * load_in(out + hd.o(i) + d);
  D += __shfl_xor_sync(0xffffffffu, D, 1);
  if (half == 0) {
    row_d[warp][r] = D;
    row_lse[warp][r] = i < T ? lse[bh * T + i] : 0.0f;
    if (i < T) dsum[bh * T + i] = D;
  }
  FragC dq[HS / 16];
  for (int n = 0; n < HS / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  const int64_t key_end = q0 + kRows < T ? q0 + kRows : T;
  for (int64_t k0 = 0; k0 < key_end; k0 += kCols) {
    __syncthreads();
    load_rows<HS>(
        ks, kCols, k0, T, [&](int64_t t) { return hd.k(t); }, 1.0f);
    load_rows<HS>(
        vs, kCols, k0, T, [&](int64_t t) { return hd.v(t); }, 1.0f);
    __syncthreads();
    if (k0 > wq0 + 15) continue;
    warp_gemm_store<HS, kCols / 16, true>(ss[warp], kCols, qs + 16 * warp * HS, HS, ks, HS);
    warp_gemm_store<HS, kCols / 16, true>(dps[warp], kCols, dos + 16 * warp * HS, HS, vs, HS);
    __syncwarp();
    for (int j = half * 16; j < half * 16 + 16; ++j) {
      const bool visible = k0 + j <= i && i < T;
      const float p = visible ? expf(ss[warp][r * kCols + j] - row_lse[warp][r]) : 0.0f;
      const float ds = p * (dps[warp][r * kCols + j] - row_d[warp][r]) * scale;
      dss[warp][r * kCols + j] = __float2bfloat16(ds);
    }
    __syncwarp();
    warp_accumulate<HS>(dq, dss[warp], ks);  // dq += dS K
  }
  __syncthreads();  // q and dout are done with: qdo now stages each warp's fp32 dq
  float* stage = reinterpret_cast<float*>(qdo) + warp * 16 * HS;
  store_rows<HS>(i < T ? dqkv + (hd.q(i) - qkv) : nullptr, dq, stage, r, half);
}

// ---- dk, dv: one block per (64 keys, b*h), walking the query tiles at and after its keys.
template <int HS, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kThreadsTc)
    tc_backward_dkdv_kernel(DqkvT* dqkv, const float* dsum, const float* dout, const QkvT* qkv,
                            const float* lse, int64_t T, int64_t C, int64_t NH, float scale) {
  // own: this block's k and v rows (bf16), then the scores and dP of each warp, then the fp32
  // dk/dv staging: one region, used in turn.
  constexpr int kOwnBytes = 2 * kRows * HS * 2;
  constexpr int kScoreBytes = 2 * kWarps * 16 * kCols * 4;
  constexpr int kStageBytes = kWarps * 16 * HS * 4;
  constexpr int kRegion = kOwnBytes > kScoreBytes
                              ? (kOwnBytes > kStageBytes ? kOwnBytes : kStageBytes)
                              : (kScoreBytes > kStageBytes ? kScoreBytes : kStageBytes);
  __shared__ __align__(32) unsigned char region[kRegion];
  __shared__ __align__(32) bf16 qs[kCols * HS];
  __shared__ __align__(32) bf16 dos[kCols * HS];
  __shared__ __align__(32) bf16 pts[kWarps][16 * kCols];
  __shared__ __align__(32) bf16 dsts[kWarps][16 * kCols];
  __shared__ float col_lse[kCols], col_d[kCols];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;  // r: this lane's key row of the warp
  const int64_t k0 = int64_t{blockIdx.y} * kRows, wk0 = k0 + 16 * warp, j = wk0 + r;

  bf16* own_k = reinterpret_cast<bf16*>(region);
  bf16* own_v = own_k + kRows * HS;
  load_rows<HS>(
      own_k, kRows, k0, T, [&](int64_t t) { return hd.k(t); }, 1.0f);
  load_rows<HS>(
      own_v, kRows, k0, T, [&](int64_t t) { return hd.v(t); }, 1.0f);
  __syncthreads();
  FragA kf[HS / 16], vf[HS / 16];  // this warp's 16 keys and values as A operands
  for (int k = 0; k < HS / 16; ++k) {
    wmma::load_matrix_sync(kf[k], own_k + 16 * warp * HS + k * 16, HS);
    wmma::load_matrix_sync(vf[k], own_v + 16 * warp * HS + k * 16, HS);
  }
  float* sts = reinterpret_cast<float*>(region) + warp * 2 * 16 * kCols;  // S^T of this warp
  float* dpts = sts + 16 * kCols;                                         // dP^T of this warp
  FragC dk[HS / 16], dv[HS / 16];
  for (int n = 0; n < HS / 16; ++n)
    wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);

  for (int64_t i0 = k0; i0 < T; i0 += kCols) {  // queries before k0 never see these keys
    __syncthreads();  // the region's own rows (first pass) or the previous tile are done with
    load_rows<HS>(
        qs, kCols, i0, T, [&](int64_t t) { return hd.q(t); }, scale);
    load_rows<HS>(
        dos, kCols, i0, T, [&](int64_t t) { return dout + hd.o(t); }, 1.0f);
    if (threadIdx.x < kCols) {
      const int64_t t = i0 + threadIdx.x;
      col_lse[threadIdx.x] = t < T ? lse[bh * T + t] : 0.0f;
      col_d[threadIdx.x] = t < T ? dsum[bh * T + t] : 0.0f;
    }
    __syncthreads();
    if (i0 + kCols - 1 < wk0) continue;  // every query of the tile is before this warp's keys
    // S^T = K_w Q^T and dP^T = V_w dO^T, 16 keys x 32 queries each.
    for (int n = 0; n < kCols / 16; ++n) {
      FragC s, dp;
      wmma::fill_fragment(s, 0.0f);
      wmma::fill_fragment(dp, 0.0f);
      for (int k = 0; k < HS / 16; ++k) {
        FragBCol fq, fdo;
        wmma::load_matrix_sync(fq, qs + n * 16 * HS + k * 16, HS);
        wmma::load_matrix_sync(fdo, dos + n * 16 * HS + k * 16, HS);
        wmma::mma_sync(s, kf[k], fq, s);
        wmma::mma_sync(dp, vf[k], fdo, dp);
      }
      wmma::store_matrix_sync(sts + n * 16, s, kCols, wmma::mem_row_major);
      wmma::store_matrix_sync(dpts + n * 16, dp, kCols, wmma::mem_row_major);
    }
    __syncwarp();
    for (int c = half * 16; c < half * 16 + 16; ++c) {
      const int64_t q = i0 + c;
      const bool visible = q >= j && q < T && j < T;
      const float p = visible ? expf(sts[r * kCols + c] - col_lse[c]) : 0.0f;
      // q was pre-scaled, so dS^T * q already carries the 1/sqrt(HS) of dk
      const float ds = p * (dpts[r * kCols + c] - col_d[c]);
      pts[warp][r * kCols + c] = __float2bfloat16(p);
      dsts[warp][r * kCols + c] = __float2bfloat16(ds);
    }
    __syncwarp();
    warp_accumulate<HS>(dv, pts[warp], dos);  // dv += P^T dO
    warp_accumulate<HS>(dk, dsts[warp], qs);  // dk += dS^T (q * scale)
  }
  __syncthreads();  // the region now stages each warp's fp32 dk, then dv
  float* stage = reinterpret_cast<float*>(region) + warp * 16 * HS;
  const bool key = j < T;
  store_rows<HS>(key ? dqkv + (hd.k(j) - qkv) : nullptr, dk, stage, r, half);
  store_rows<HS>(key ? dqkv + (hd.v(j) - qkv) : nullptr, dv, stage, r, half);
}

}  // namespace

bool tc_attention_supports(int64_t head_size) {
  return head_size_in<32, 64>(head_size);
}

template <class OutT, class QkvT>
void tc_attention_forward(OutT* out, float* lse, const QkvT* qkv, int64_t B, int64_t T, int64_t C,
                          int64_t NH, cudaStream_t stream) {
  if (B * T == 0) return;
  with_head_size<32, 64>(C / NH, "tensor-core attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    launch(tc_forward_kernel<HS, OutT, QkvT>, attention_grid(B, T, NH, kRows), kThreadsTc, stream,
           out, lse, qkv, T, C, NH, attention_scale(HS));
    CUDA_CHECK_LAUNCH("tc_forward_kernel");
  });
}

template <class OutT, class QkvT, class DqkvT>
void tc_attention_backward(DqkvT* dqkv, float* dsum_scratch, const float* dout, const QkvT* qkv,
                           const OutT* out, const float* lse, int64_t B, int64_t T, int64_t C,
                           int64_t NH, cudaStream_t stream) {
  if (B * T == 0) return;
  with_head_size<32, 64>(C / NH, "tensor-core attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    const float scale = attention_scale(HS);
    launch(tc_backward_dq_kernel<HS, OutT, QkvT, DqkvT>, attention_grid(B, T, NH, kRows),
           kThreadsTc, stream, dqkv, dsum_scratch, dout, qkv, out, lse, T, C, NH, scale);
    CUDA_CHECK_LAUNCH("tc_backward_dq_kernel");
    launch(tc_backward_dkdv_kernel<HS, QkvT, DqkvT>, attention_grid(B, T, NH, kRows), kThreadsTc,
           stream, dqkv, dsum_scratch, dout, qkv, lse, T, C, NH, scale);
    CUDA_CHECK_LAUNCH("tc_backward_dkdv_kernel");
  });
}

template void tc_attention_forward(uint16_t*, float*, const float*, int64_t, int64_t, int64_t,
                                   int64_t, cudaStream_t);
template void tc_attention_forward(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                   cudaStream_t);
template void tc_attention_backward(float*, float*, const float*, const float*, const uint16_t*,
                                    const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void tc_attention_backward(float*, float*, const float*, const float*, const float*,
                                    const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
// bf16 compute with bf16 qkv
template void tc_attention_forward(uint16_t*, float*, const uint16_t*, int64_t, int64_t, int64_t,
                                   int64_t, cudaStream_t);
template void tc_attention_backward(float*, float*, const float*, const uint16_t*, const uint16_t*,
                                    const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void tc_attention_backward(uint16_t*, float*, const float*, const uint16_t*,
                                    const uint16_t*, const float*, int64_t, int64_t, int64_t,
                                    int64_t, cudaStream_t);

}  // namespace trainer::kernels

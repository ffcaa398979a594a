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
                         float scale) {
  constexpr int kTile = kTileOf<HS>;
  __shared__ __align__(16) float ks[kTile][HS];
  __shared__ __align__(16) float vs[kTile][HS];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int64_t q0 = int64_t{blockIdx.y} * kTile, i = q0 + threadIdx.x;
  const bool row = i < T;
  float q[HS], o[HS];
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) q[d] = row ? load_in(hd.q(i) + d) : 0.0f, o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t key_end = q0 + kTile < T ? q0 + kTile : T;  // causal: no key past the last row
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();  // every thread is done with the previous tile
    load_kv_tile<HS, QkvT>(ks, vs, hd, k0);
    __syncthreads();
    if (!row || k0 > i) continue;
    const int64_t n = i - k0 + 1;  // keys k0..i of this tile are visible to row i
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
  OutT* y = out + hd.o(i);
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) store_out(y + d, o[d] * inv);
  lse[bh * T + i] = m + logf(l);
}

// One thread per query row i: D_i = <dout_i, out_i> (kept for the dk/dv kernel) and
// dq_i = scale * sum_j p_ij (dp_ij - D_i) k_j with p_ij = exp(s_ij - lse_i), dp_ij = <dout_i,
// v_j>.
template <int HS, class OutT, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kTileOf<HS>)
    flash_backward_dq_kernel(DqkvT* dqkv, float* dsum, const float* dout, const QkvT* qkv,
                             const OutT* out, const float* lse, int64_t T, int64_t C, int64_t NH,
                             float scale) {
  constexpr int kTile = kTileOf<HS>;
  __shared__ __align__(16) float ks[kTile][HS];
  __shared__ __align__(16) float vs[kTile][HS];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int64_t q0 = int64_t{blockIdx.y} * kTile, i = q0 + threadIdx.x;
  const bool row = i < T;
  float q[HS], dy[HS], dq[HS];
  float D = 0.0f;
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) {
    q[d] = row ? load_in(hd.q(i) + d) : 0.0f;
    dy[d] = row ? dout[hd.o(i) + d] : 0.0f;
    D += row ? dy[d] * load_in(out + hd.o(i) + d) : 0.0f;
    dq[d] = 0.0f;
  }
  const float L = row ? lse[bh * T + i] : 0.0f;
  if (row) dsum[bh * T + i] = D;
  const int64_t key_end = q0 + kTile < T ? q0 + kTile : T;
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();
    load_kv_tile<HS, QkvT>(ks, vs, hd, k0);
    __syncthreads();
    if (!row || k0 > i) continue;
    const int64_t n = i - k0 + 1 < kTile ? i - k0 + 1 : kTile;
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
  DqkvT* g = dqkv + (hd.q(i) - qkv);
  TRAINER_UNROLL
  for (int d = 0; d < HS; ++d) store_out(g + d, dq[d]);
}

// One thread per key row j: dv_j = sum_i p_ij dout_i and dk_j = scale * sum_i ds_ij q_i over the
// query rows i >= j. The thread's own k_j and v_j sit in padded shared rows (no bank conflicts);
// the query tile is read by all threads at the same address (a broadcast).
template <int HS, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kTileOf<HS>)
    flash_backward_dkdv_kernel(DqkvT* dqkv, const float* dsum, const float* dout, const QkvT* qkv,
                               const float* lse, int64_t T, int64_t C, int64_t NH, float scale) {
  constexpr int kTile = kTileOf<HS>;
  __shared__ __align__(16) float qs[kTile][HS];
  __shared__ __align__(16) float dys[kTile][HS];
  __shared__ float kown[kTile][HS + 1], vown[kTile][HS + 1];
  __shared__ float ls[kTile], ds_row[kTile];
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
  for (int64_t i0 = k0; i0 < T; i0 += kTile) {  // causal: queries before k0 never see these keys
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * HS; e += blockDim.x) {
      const int r = e / HS, d = e % HS;
      const int64_t t = i0 + r;
      qs[r][d] = t < T ? load_in(hd.q(t) + d) : 0.0f;
      dys[r][d] = t < T ? dout[hd.o(t) + d] : 0.0f;
    }
    if (threadIdx.x < kTile) {
      const int64_t t = i0 + threadIdx.x;
      ls[threadIdx.x] = t < T ? lse[bh * T + t] : 0.0f;
      ds_row[threadIdx.x] = t < T ? dsum[bh * T + t] : 0.0f;
    }
    __syncthreads();
    if (!key) continue;
    const int64_t first = j > i0 ? j - i0 : 0;  // rows i >= j only
    const int64_t last = T - i0 < kTile ? T - i0 : kTile;
    for (int64_t r = first; r < last; ++r) {
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
           out, lse, qkv, T, C, NH, attention_scale(HS));
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
           stream, dqkv, dsum_scratch, dout, qkv, out, lse, T, C, NH, attention_scale(HS));
    CUDA_CHECK_LAUNCH("flash_backward_dq_kernel");
    launch(flash_backward_dkdv_kernel<HS, QkvT, DqkvT>, attention_grid(B, T, NH, kTile), kTile,
           stream, dqkv, dsum_scratch, dout, qkv, lse, T, C, NH, attention_scale(HS));
    CUDA_CHECK_LAUNCH("flash_backward_dkdv_kernel");
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

}  // namespace trainer::kernels

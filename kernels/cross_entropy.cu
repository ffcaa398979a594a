// Fused softmax + cross-entropy (runtime/cpu/ops_loss.h): one block per row of logits and two
// passes over the row: the max and the sum of exponentials together (a thread takes the max of
// the logits it holds in registers, then their exponentials' sum; the rest of its share folds in
// 16 bytes at a time, the sum rescaled whenever the max grows), then the gradient, written in
// place; the second pass takes what it can from registers the first filled. Each exponential is
// one fma and one ex2.approx (kernels/common.cuh's exp2_ftz), as in the attention kernels. A row
// that starts 16-byte aligned (the padded vocabulary's rows are) is read and written 16 bytes at a
// time, 8 bf16 or 4 fp32 logits; its last V % 8 (or 4) columns and the padding go one by one.
#include <cmath>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/vec.cuh"

namespace trainer::kernels {
namespace {

// Online softmax statistics of some logits: their max m and the sum s of exp(z - m).
struct MaxSum {
  float m = -INFINITY, s = 0;
};

// The max in base 2 that a sum's exponentials subtract: 0 while the max is -inf, so that -inf
// logits add 2^-inf = 0 rather than exp(-inf - -inf) = NaN.
__device__ inline float base2(float m) {
  return m == -INFINITY ? 0.0f : m * kLog2e;
}
// Adds e^(v - a.m) for kN logits, a.m first raised to their max (a.s rescaled to it); each
// exponential is one fma and one ex2.approx (exp2_ftz). fmaxf passes over a NaN logit, whose
// exponential then makes the sum NaN, as in the cpu backend.
template <int kN>
__device__ inline void add_logits(MaxSum& a, const float (&v)[kN]) {
  float m = a.m;
  for (int k = 0; k < kN; ++k) m = fmaxf(m, v[k]);
  if (m > a.m) {
    a.s *= exp2_ftz((a.m - m) * kLog2e);  // (a.s is 0 while a.m is -inf)
    a.m = m;
  }
  const float base = base2(a.m);
  for (int k = 0; k < kN; ++k) a.s += exp2_ftz(fmaf(v[k], kLog2e, -base));
}

// The products are rounded on their own (__fmul_rn: no fused multiply-add), so that combine(a, b)
// and combine(b, a) give the same bits on the two lanes of a shuffle.
__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};  // both empty (0, or NaN from a NaN logit)
  return {m, __fmul_rn(a.s, expf(a.m - m)) + __fmul_rn(b.s, expf(b.m - m))};
}

__device__ inline MaxSum warp_max_sum(MaxSum v) {
  for (int off = 16; off > 0; off /= 2)
    v = combine(v,
                {__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)});
  return v;
}

// Over the block (blockDim.x a multiple of 32), in a fixed order; every thread gets the result,
// the same bits (every warp reduces the same values the same way).
__device__ inline MaxSum block_max_sum(MaxSum v, MaxSum* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_max_sum(lane < warps ? shared[lane] : MaxSum{});
}

// 16 bytes of logits (4 fp32 or 8 bf16, as loaded) as fp32, and back.
__device__ inline void decode_logits(float (&v)[4], const uint32_t (&w)[4]) {
  for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(w[i]);
}
__device__ inline void decode_logits(float (&v)[8], const uint32_t (&w)[4]) {
  for (int i = 0; i < 4; ++i) v[2 * i] = bf16_lo(w[i]), v[2 * i + 1] = bf16_hi(w[i]);
}
__device__ inline void store_logits(float* p, const float (&v)[4]) {
  store_floats4(p, v);
}
__device__ inline void store_logits(uint16_t* p, const float (&v)[8]) {  // as store_out (finite)
  uint32_t w[4];
  for (int i = 0; i < 4; ++i) w[i] = pack_bf16(v[2 * i], v[2 * i + 1]);
  store16(p, w);
}

// The row's prologue: the padding columns [classes, Vp) get no gradient; an ignored row
// (target < 0) gets loss 0 and a bad one (target >= vocab) NaN (no out-of-bounds read), with a
// zero gradient, and the kernel is done with it (true).
template <class LogitT>
__device__ inline bool zero_padding_or_ignored_row(LogitT* z, float* loss, int64_t target,
                                                   int64_t vocab, int64_t classes, int64_t Vp,
                                                   bool write_grad) {
  if (write_grad)  // vocabulary padding: no gradient
    for (int64_t j = classes + threadIdx.x; j < Vp; j += blockDim.x) store_out(z + j, 0.0f);
  if (target >= 0 && target < vocab) return false;
  if (threadIdx.x == 0) *loss = target < 0 ? 0.0f : NAN;
  if (write_grad)
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) store_out(z + j, 0.0f);
  return true;
}

template <class LogitT>
__global__ void __launch_bounds__(1024)
    softmax_cross_entropy_kernel(LogitT* logits, float* losses, const int32_t* targets, int64_t V,
                                 int64_t Vp, float dloss_scale) {
  constexpr int kVec = 16 / sizeof(LogitT);
  __shared__ MaxSum red[32];
  const int64_t row = blockIdx.x;
  LogitT* z = logits + row * Vp;
  const int64_t target = targets[row];
  const bool write_grad = dloss_scale != 0.0f;
  if (zero_padding_or_ignored_row(z, losses + row, target, V, V, Vp, write_grad)) return;
  const float z_target = load_in(z + target);  // before any thread overwrites it
  // Columns [0, vec_end) kVec at a time, each thread taking every blockDim.x-th group.
  const int64_t vec_end = aligned16(z) ? V / kVec * kVec : 0;
  const int64_t vec_first = int64_t{threadIdx.x} * kVec, vec_step = int64_t{blockDim.x} * kVec;
  // A thread's first kCached groups stay in registers from the statistics' pass to the
  // gradient's (compile-time indices: an unrolled loop), so that pass reads again only the rest:
  // all of a 50304-column bf16 row at 1024 threads but for a few groups.
  constexpr int kCached = 6;
  uint32_t cached[kCached][4] = {};
  MaxSum st;
  for (int c = 0; c < kCached; ++c) {  // every load first, then the arithmetic
    const int64_t j = vec_first + c * vec_step;
    if (j < vec_end) load16(cached[c], z + j);
  }
  // The cached groups: their max, then the sum against it (no rescaling among them).
  TRAINER_UNROLL
  for (int c = 0; c < kCached && vec_first + c * vec_step < vec_end; ++c) {
    float v[kVec];
    decode_logits(v, cached[c]);
    for (int k = 0; k < kVec; ++k) st.m = fmaxf(st.m, v[k]);
  }
  const float cached_base = base2(st.m);
  TRAINER_UNROLL
  for (int c = 0; c < kCached && vec_first + c * vec_step < vec_end; ++c) {
    float v[kVec];
    decode_logits(v, cached[c]);
    for (int k = 0; k < kVec; ++k) st.s += exp2_ftz(fmaf(v[k], kLog2e, -cached_base));
  }
  for (int64_t j = vec_first + kCached * vec_step; j < vec_end; j += vec_step) {
    uint32_t w[4];
    float v[kVec];
    load16(w, z + j);
    decode_logits(v, w);
    add_logits(st, v);
  }
  for (int64_t j = vec_end + threadIdx.x; j < V; j += blockDim.x) {
    const float v[1] = {load_in(z + j)};
    add_logits(st, v);
  }
  st = block_max_sum(st, red);
  if (threadIdx.x == 0) losses[row] = logf(st.s) + st.m - z_target;
  if (!write_grad) return;
  const float inv_sum = 1.0f / st.s, base = base2(st.m);
  auto grad = [&](float zj, int64_t j) {
    return (exp2_ftz(fmaf(zj, kLog2e, -base)) * inv_sum - (j == target ? 1.0f : 0.0f)) *
           dloss_scale;
  };
  const auto grad_group = [&](const uint32_t(&w)[4], int64_t j) {  // the group at column j
    float v[kVec];
    decode_logits(v, w);
    for (int k = 0; k < kVec; ++k) v[k] = grad(v[k], j + k);
    store_logits(z + j, v);
  };
  for (int c = 0; c < kCached && vec_first + c * vec_step < vec_end; ++c)
    grad_group(cached[c], vec_first + c * vec_step);
  for (int64_t j = vec_first + kCached * vec_step; j < vec_end; j += vec_step) {
    uint32_t w[4];
    load16(w, z + j);
    grad_group(w, j);
  }
  for (int64_t j = vec_end + threadIdx.x; j < V; j += blockDim.x)
    store_out(z + j, grad(load_in(z + j), j));
}

// Vocabulary-parallel halves (runtime/cpu/ops_loss.h's cross_entropy_shard_*): one block per row,
// one pass over this shard's class columns each (a rank holds 1/tp of the row, so the statistics'
// pass reads the row from memory and the gradient's a second time, uncached).
template <class LogitT>
__global__ void __launch_bounds__(1024)
    cross_entropy_shard_stats_kernel(float* stats, const LogitT* logits, const int32_t* targets,
                                     int64_t classes, int64_t Vp, int64_t vocab_start) {
  __shared__ MaxSum red[32];
  const int64_t row = blockIdx.x;
  const LogitT* z = logits + row * Vp;
  MaxSum st;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
    const float v[1] = {load_in(z + j)};
    add_logits(st, v);
  }
  st = block_max_sum(st, red);
  if (threadIdx.x != 0) return;
  const int64_t target = targets[row], local = target - vocab_start;
  float* out = stats + row * 3;
  out[0] = st.m;
  out[1] = st.s;
  out[2] = target >= 0 && local >= 0 && local < classes ? load_in(z + local) : 0.0f;
}

template <class LogitT>
__global__ void __launch_bounds__(1024)
    cross_entropy_shard_finish_kernel(LogitT* logits, float* losses, const float* all_stats,
                                      int64_t R, int64_t N, const int32_t* targets, int64_t classes,
                                      int64_t Vp, int64_t vocab_start, int64_t vocab,
                                      float dloss_scale) {
  const int64_t row = blockIdx.x;
  LogitT* z = logits + row * Vp;
  const int64_t target = targets[row];
  const bool write_grad = dloss_scale != 0.0f;
  if (zero_padding_or_ignored_row(z, losses + row, target, vocab, classes, Vp, write_grad)) return;
  // Every thread combines the shards' statistics, in rank order (the same bits on every rank).
  float m = -INFINITY, s = 0, z_target = 0;
  for (int64_t r = 0; r < R; ++r) m = fmaxf(m, all_stats[(r * N + row) * 3]);
  for (int64_t r = 0; r < R; ++r) {
    const float* st = all_stats + (r * N + row) * 3;
    if (st[0] != -INFINITY) s += st[1] * expf(st[0] - m);
    z_target += st[2];
  }
  if (threadIdx.x == 0) losses[row] = logf(s) + m - z_target;
  if (!write_grad) return;
  const float inv_sum = 1.0f / s, base = base2(m);
  const int64_t local = target - vocab_start;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    store_out(z + j, (exp2_ftz(fmaf(load_in(z + j), kLog2e, -base)) * inv_sum -
                      (j == local ? 1.0f : 0.0f)) *
                         dloss_scale);
}

int ce_threads(int64_t columns) {
  return columns >= 1024 ? 1024 : (columns >= 256 ? 256 : 64);
}

}  // namespace

template <class LogitT>
void cross_entropy_shard_stats(float* stats, const LogitT* logits, const int32_t* targets,
                               int64_t N, int64_t classes, int64_t Vp, int64_t vocab_start,
                               cudaStream_t stream) {
  if (N == 0) return;
  launch(cross_entropy_shard_stats_kernel<LogitT>, static_cast<unsigned>(N), ce_threads(classes),
         stream, stats, logits, targets, classes, Vp, vocab_start);
  CUDA_CHECK_LAUNCH("cross_entropy_shard_stats_kernel");
}
template void cross_entropy_shard_stats(float*, const float*, const int32_t*, int64_t, int64_t,
                                        int64_t, int64_t, cudaStream_t);
template void cross_entropy_shard_stats(float*, const uint16_t*, const int32_t*, int64_t, int64_t,
                                        int64_t, int64_t, cudaStream_t);

template <class LogitT>
void cross_entropy_shard_finish(LogitT* logits, float* losses, const float* all_stats, int64_t R,
                                const int32_t* targets, int64_t N, int64_t classes, int64_t Vp,
                                int64_t vocab_start, int64_t vocab, float dloss_scale,
                                cudaStream_t stream) {
  if (N == 0) return;
  launch(cross_entropy_shard_finish_kernel<LogitT>, static_cast<unsigned>(N), ce_threads(Vp),
         stream, logits, losses, all_stats, R, N, targets, classes, Vp, vocab_start, vocab,
         dloss_scale);
  CUDA_CHECK_LAUNCH("cross_entropy_shard_finish_kernel");
}
template void cross_entropy_shard_finish(float*, float*, const float*, int64_t, const int32_t*,
                                         int64_t, int64_t, int64_t, int64_t, int64_t, float,
                                         cudaStream_t);
template void cross_entropy_shard_finish(uint16_t*, float*, const float*, int64_t, const int32_t*,
                                         int64_t, int64_t, int64_t, int64_t, int64_t, float,
                                         cudaStream_t);

template <class LogitT>
void softmax_cross_entropy(LogitT* logits, float* losses, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float dloss_scale, cudaStream_t stream) {
  if (N == 0) return;
  const int threads = V >= 1024 ? 1024 : (V >= 256 ? 256 : 64);
  launch(softmax_cross_entropy_kernel<LogitT>, static_cast<unsigned>(N), threads, stream, logits,
         losses, targets, V, Vp, dloss_scale);
  CUDA_CHECK_LAUNCH("softmax_cross_entropy_kernel");
}
template void softmax_cross_entropy(float*, float*, const int32_t*, int64_t, int64_t, int64_t,
                                    float, cudaStream_t);
template void softmax_cross_entropy(uint16_t*, float*, const int32_t*, int64_t, int64_t, int64_t,
                                    float, cudaStream_t);

}  // namespace trainer::kernels

#pragma once
// Causal multi-head self-attention of the cpu reference (llm.c layout), templated on the scalar
// type. qkv[B,T,3C] holds q | k | v along the last dim, each [NH,HS] with C = NH*HS.
//
// Each (batch, head) pair is a few GEMMs on its strided q, k, v, dout and dqkv columns, run in
// parallel over the pairs. Results do not depend on the thread count: OpenBLAS splits a GEMM's rows
// and columns among its threads, never a sum. The causal mask is kept out of the GEMMs by row
// blocks: the rows [r0, r1) of a product see only the keys [0, r1), and the few entries above the
// diagonal inside a block are zeros of P and dS, so they add nothing (unless a later row of v, k
// or q holds an inf or NaN: 0 * inf makes the earlier rows NaN too, where the step is already
// non-finite).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/core/attention_state.h"
#include "runtime/cpu/ops_common.h"
#include "runtime/cpu/ops_gemm.h"

namespace trainer::cpu {

inline constexpr int64_t kAttentionRowBlock = 64;

// c[m, n] (ldc) = alpha * op_a(a) op_b(b) + beta * c, each operand a strided block of rows.
template <class Real>
void strided_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                  const Real* a, int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c,
                  int64_t ldc) {
  GemmArgs<Real> g;
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.m = m, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc;
  gemm(g);
}

// One head of one sequence: queries q[Tq] (row stride ldq) at positions off .. off + Tq - 1,
// off = Tk - Tq, over keys k[Tk] and values v[Tk] (row stride ldkv) at positions 0 .. Tk - 1;
// causal: query t sees the keys [0, off + t]. o[Tq] (ldo) = softmax(scale q k^T) v, and
// a[Tq, Tk] (lda) keeps the probabilities, zero past each row's last key. (Self-attention is
// Tq = Tk; a context-parallel chunk's queries see the whole sequence before them.)
template <class Real>
void causal_head_forward(Real* o, int64_t ldo, Real* a, int64_t lda, const Real* q, int64_t ldq,
                         const Real* k, const Real* v, int64_t ldkv, int64_t Tq, int64_t Tk,
                         int64_t HS, Real scale) {
  const int64_t off = Tk - Tq;
  for (int64_t r0 = 0; r0 < Tq; r0 += kAttentionRowBlock) {  // a[r0:r1, :off+r1] = scale q k^T
    const int64_t r1 = std::min(Tq, r0 + kAttentionRowBlock);
    strided_gemm(false, true, r1 - r0, off + r1, HS, scale, q + r0 * ldq, ldq, k, ldkv, Real(0),
                 a + r0 * lda, lda);
  }
  for (int64_t t = 0; t < Tq; ++t) {  // the causal softmax of row t, zeros after it
    Real* row = a + t * lda;
    const int64_t last = off + t;
    Real maxv = -std::numeric_limits<Real>::infinity();
    for (int64_t t2 = 0; t2 <= last; ++t2) maxv = std::max(maxv, row[t2]);
    Real sum = 0;
    for (int64_t t2 = 0; t2 <= last; ++t2) sum += (row[t2] = std::exp(row[t2] - maxv));
    const Real inv = Real(1) / sum;
    for (int64_t t2 = 0; t2 <= last; ++t2) row[t2] *= inv;
    std::fill(row + last + 1, row + Tk, Real(0));
  }
  for (int64_t r0 = 0; r0 < Tq; r0 += kAttentionRowBlock) {  // o[r0:r1] = a[r0:r1, :off+r1] v
    const int64_t r1 = std::min(Tq, r0 + kAttentionRowBlock);
    strided_gemm(false, false, r1 - r0, HS, off + r1, Real(1), a + r0 * lda, lda, v, ldkv, Real(0),
                 o + r0 * ldo, ldo);
  }
}

// The gradient of causal_head_forward given dy[Tq] (ldy) and its probabilities a: ADDED to
// dq[Tq] (ldq), dk[Tk] and dv[Tk] (ldkv).
template <class Real>
void causal_head_backward(Real* dq, Real* dk, Real* dv, const Real* dy, int64_t ldy, const Real* q,
                          int64_t ldq, const Real* k, const Real* v, int64_t ldkv, const Real* a,
                          int64_t lda, int64_t Tq, int64_t Tk, int64_t HS, Real scale) {
  const int64_t off = Tk - Tq;
  thread_local std::vector<Real> ds_rows;  // one row block's dP, then dS: [rows, keys] of [64, Tk]
  ds_rows.resize(static_cast<size_t>(std::min(Tq, kAttentionRowBlock) * Tk));
  Real* ds = ds_rows.data();
  for (int64_t r0 = 0; r0 < Tq; r0 += kAttentionRowBlock) {
    const int64_t r1 = std::min(Tq, r0 + kAttentionRowBlock), rows = r1 - r0, keys = off + r1;
    // dP[r0:r1, :keys] = dy v^T, then dS = P * (dP - sum_j P dP) * scale row by row
    strided_gemm(false, true, rows, keys, HS, Real(1), dy + r0 * ldy, ldy, v, ldkv, Real(0), ds,
                 Tk);
    for (int64_t t = r0; t < r1; ++t) {
      const Real* p = a + t * lda;
      Real* row = ds + (t - r0) * Tk;
      const int64_t last = off + t;
      Real p_dot_dp = 0;
      for (int64_t t2 = 0; t2 <= last; ++t2) p_dot_dp += p[t2] * row[t2];
      for (int64_t t2 = 0; t2 <= last; ++t2) row[t2] = p[t2] * (row[t2] - p_dot_dp) * scale;
      std::fill(row + last + 1, row + keys, Real(0));
    }
    // dv[:keys] += P[r0:r1, :keys]^T dy[r0:r1]; dq[r0:r1] += dS k[:keys];
    // dk[:keys] += dS^T q[r0:r1]
    strided_gemm(true, false, keys, HS, rows, Real(1), a + r0 * lda, lda, dy + r0 * ldy, ldy,
                 Real(1), dv, ldkv);
    strided_gemm(false, false, rows, HS, keys, Real(1), ds, Tk, k, ldkv, Real(1), dq + r0 * ldq,
                 ldq);
    strided_gemm(true, false, keys, HS, rows, Real(1), ds, Tk, q + r0 * ldq, ldq, Real(1), dk,
                 ldkv);
  }
}

// out[B,T,C] = softmax(q k^T / sqrt(HS), causal) v per head; att[B,NH,T,T] keeps the
// probabilities (zero above the diagonal) for backward.
template <class Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const int64_t HS = C / NH, C3 = 3 * C;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  TRAINER_PARALLEL_FOR_IF(B * NH * T * T * HS >= kParallelMinWork)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const Real* q = qkv + b * T * C3 + h * HS;  // row t at q + t * C3; k and v C, 2C further
    causal_head_forward(out + b * T * C + h * HS, C, att + bh * T * T, T, q, C3, q + C, q + 2 * C,
                        C3, T, T, HS, scale);
  }
}

// dqkv[B,T,3C] += gradient of attention_forward given dout[B,T,C] and the saved att.
// Each (batch, head) pair owns its slice of dqkv, so the parallel loop is race-free.
template <class Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int64_t B,
                        int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH, C3 = 3 * C;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  TRAINER_PARALLEL_FOR_IF(B * NH * T * T * HS >= kParallelMinWork)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const Real* q = qkv + b * T * C3 + h * HS;  // k and v C, 2C further
    Real* dq = dqkv + b * T * C3 + h * HS;      // dk and dv C, 2C further
    causal_head_backward(dq, dq + C, dq + 2 * C, dout + b * T * C + h * HS, C, q, C3, q + C,
                         q + 2 * C, C3, att + bh * T * T, T, T, T, HS, scale);
  }
}

// Context parallelism (Backend::attention_forward_cp): a sequence of T = 2 * cp * L tokens is
// cut into 2cp chunks of L, and rank r holds chunks r and 2cp - 1 - r, in that order, as its
// Tl = 2L rows. qkv_all [cp,B,Tl,3C] holds every rank's rows (an all-gather, rank order);
// `seq` [B,T,3C] receives them in sequence order.
// Calls f(all_index, seq_index, n) for each run of n consecutive elements that sit at all_index
// in `all` and at seq_index in `seq`: each rank's chunk of each sequence.
template <class F>
void for_each_context_run(int64_t cp, int64_t B, int64_t Tl, int64_t width, F&& f) {
  const int64_t L = Tl / 2, T = cp * Tl;
  for (int64_t r = 0; r < cp; ++r)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t half = 0; half < 2; ++half)
        f(((r * B + b) * Tl + half * L) * width, (b * T + context_chunk(r, cp, half) * L) * width,
          L * width);
}

template <class Real>
void context_to_sequence(Real* seq, const Real* all, int64_t cp, int64_t B, int64_t Tl,
                         int64_t width) {
  for_each_context_run(cp, B, Tl, width,
                       [&](int64_t a, int64_t s, int64_t n) { std::copy_n(all + a, n, seq + s); });
}

template <class Real>
void sequence_to_context(Real* all, const Real* seq, int64_t cp, int64_t B, int64_t Tl,
                         int64_t width) {
  for_each_context_run(cp, B, Tl, width,
                       [&](int64_t a, int64_t s, int64_t n) { std::copy_n(seq + s, n, all + a); });
}

// out[B,Tl,C]: rank `rank`'s queries over the keys of the whole sequence up to each one;
// att[B,NH,Tl,T] their probabilities (zero past each row's last key).
template <class Real>
void attention_forward_cp(Real* out, Real* att, const Real* qkv_all, int64_t rank, int64_t cp,
                          int64_t B, int64_t Tl, int64_t C, int64_t NH) {
  const int64_t HS = C / NH, C3 = 3 * C, L = Tl / 2, T = cp * Tl;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  thread_local std::vector<Real> seq_buffer;
  seq_buffer.resize(static_cast<size_t>(B * T * C3));
  Real* seq = seq_buffer.data();
  context_to_sequence(seq, qkv_all, cp, B, Tl, C3);
  TRAINER_PARALLEL_FOR_IF(B * NH * Tl * T * HS >= kParallelMinWork)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const Real* s = seq + b * T * C3 + h * HS;
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t chunk = context_chunk(rank, cp, half), Tk = (chunk + 1) * L;
      Real* a = att + (bh * Tl + half * L) * T;
      causal_head_forward(out + (b * Tl + half * L) * C + h * HS, C, a, T, s + chunk * L * C3, C3,
                          s + C, s + 2 * C, C3, L, Tk, HS, scale);
      for (int64_t t = 0; t < L; ++t) std::fill(a + t * T + Tk, a + (t + 1) * T, Real(0));
    }
  }
}

// dqkv_all[cp,B,Tl,3C] = the gradient of attention_forward_cp's out with respect to every rank's
// qkv (OVERWRITTEN): this rank's query gradients in its own block, and every rank's key and value
// gradients from this rank's queries. Summed over the cp ranks (a reduce-scatter), each block is
// its rank's dqkv.
template <class Real>
void attention_backward_cp(Real* dqkv_all, const Real* dout, const Real* qkv_all, const Real* att,
                           int64_t rank, int64_t cp, int64_t B, int64_t Tl, int64_t C, int64_t NH) {
  const int64_t HS = C / NH, C3 = 3 * C, L = Tl / 2, T = cp * Tl;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  thread_local std::vector<Real> seq_buffer, dseq_buffer;
  seq_buffer.resize(static_cast<size_t>(B * T * C3));
  dseq_buffer.assign(static_cast<size_t>(B * T * C3), Real(0));
  Real* seq = seq_buffer.data();
  Real* dseq = dseq_buffer.data();
  context_to_sequence(seq, qkv_all, cp, B, Tl, C3);
  // (each pair owns its head's columns of its sequence: race-free)
  TRAINER_PARALLEL_FOR_IF(B * NH * Tl * T * HS >= kParallelMinWork)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const Real* s = seq + b * T * C3 + h * HS;
    Real* ds = dseq + b * T * C3 + h * HS;
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t chunk = context_chunk(rank, cp, half), Tk = (chunk + 1) * L;
      causal_head_backward(ds + chunk * L * C3, ds + C, ds + 2 * C,
                           dout + (b * Tl + half * L) * C + h * HS, C, s + chunk * L * C3, C3,
                           s + C, s + 2 * C, C3, att + (bh * Tl + half * L) * T, T, L, Tk, HS,
                           scale);
    }
  }
  sequence_to_context(dqkv_all, dseq, cp, B, Tl, C3);
}

}  // namespace trainer::cpu

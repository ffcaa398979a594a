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
    Real* a = att + bh * T * T;
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {  // a[r0:r1, :r1] = scale q k^T
      const int64_t r1 = std::min(T, r0 + kAttentionRowBlock);
      strided_gemm(false, true, r1 - r0, r1, HS, scale, q + r0 * C3, C3, q + C, C3, Real(0),
                   a + r0 * T, T);
    }
    for (int64_t t = 0; t < T; ++t) {  // the causal softmax of row t, zeros after it
      Real* row = a + t * T;
      Real maxv = -std::numeric_limits<Real>::infinity();
      for (int64_t t2 = 0; t2 <= t; ++t2) maxv = std::max(maxv, row[t2]);
      Real sum = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) sum += (row[t2] = std::exp(row[t2] - maxv));
      const Real inv = Real(1) / sum;
      for (int64_t t2 = 0; t2 <= t; ++t2) row[t2] *= inv;
      std::fill(row + t + 1, row + T, Real(0));
    }
    Real* o = out + b * T * C + h * HS;
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {  // o[r0:r1] = a[r0:r1, :r1] v
      const int64_t r1 = std::min(T, r0 + kAttentionRowBlock);
      strided_gemm(false, false, r1 - r0, HS, r1, Real(1), a + r0 * T, T, q + 2 * C, C3, Real(0),
                   o + r0 * C, C);
    }
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
    const Real* dy = dout + b * T * C + h * HS;
    const Real* a = att + bh * T * T;
    Real* dq = dqkv + b * T * C3 + h * HS;   // dk and dv C, 2C further
    thread_local std::vector<Real> ds_rows;  // one row block's dP, then dS: [rows, r1] of [64, T]
    ds_rows.resize(static_cast<size_t>(std::min(T, kAttentionRowBlock) * T));
    Real* ds = ds_rows.data();
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
      const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), rows = r1 - r0;
      // dP[r0:r1, :r1] = dout v^T, then dS = P * (dP - sum_j P dP) / sqrt(HS) row by row
      strided_gemm(false, true, rows, r1, HS, Real(1), dy + r0 * C, C, q + 2 * C, C3, Real(0), ds,
                   T);
      for (int64_t t = r0; t < r1; ++t) {
        const Real* p = a + t * T;
        Real* row = ds + (t - r0) * T;
        Real p_dot_dp = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) p_dot_dp += p[t2] * row[t2];
        for (int64_t t2 = 0; t2 <= t; ++t2) row[t2] = p[t2] * (row[t2] - p_dot_dp) * scale;
        std::fill(row + t + 1, row + r1, Real(0));
      }
      // dv[:r1] += P[r0:r1, :r1]^T dout[r0:r1]; dq[r0:r1] += dS k[:r1]; dk[:r1] += dS^T q[r0:r1]
      strided_gemm(true, false, r1, HS, rows, Real(1), a + r0 * T, T, dy + r0 * C, C, Real(1),
                   dq + 2 * C, C3);
      strided_gemm(false, false, rows, HS, r1, Real(1), ds, T, q + C, C3, Real(1), dq + r0 * C3,
                   C3);
      strided_gemm(true, false, r1, HS, rows, Real(1), ds, T, q + r0 * C3, C3, Real(1), dq + C, C3);
    }
  }
}

}  // namespace trainer::cpu

#pragma once
// Argument packing shared by every backend's GEMM: fills packed leading dimensions (0 means
// packed) and rejects shapes the BLAS library would only complain about on stderr. Works on any
// argument struct with the fields of Backend::Gemm (cpu GemmArgs<Real>, cuda LtGemmArgs).
#include <algorithm>
#include <cstdint>

#include "runtime/core/check.h"

namespace trainer {

template <class Args>
Args packed_gemm_args(Args g) {
  TRAINER_CHECK(
      g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 1,
      "gemm: bad sizes m=" << g.m << " n=" << g.n << " k=" << g.k << " batch=" << g.batch);
  const int64_t a_cols = g.trans_a ? g.m : g.k, b_cols = g.trans_b ? g.k : g.n;
  if (g.lda == 0) g.lda = std::max<int64_t>(1, a_cols);
  if (g.ldb == 0) g.ldb = std::max<int64_t>(1, b_cols);
  if (g.ldc == 0) g.ldc = std::max<int64_t>(1, g.n);
  TRAINER_CHECK(
      g.lda >= a_cols && g.ldb >= b_cols && g.ldc >= g.n,
      "gemm: leading dimension too small: lda=" << g.lda << " ldb=" << g.ldb << " ldc=" << g.ldc);
  TRAINER_CHECK(g.batch == 1 || g.stride_c != 0, "gemm: batch " << g.batch << " with stride_c 0");
  TRAINER_CHECK(g.c != nullptr && (g.k == 0 || (g.a != nullptr && g.b != nullptr)),
                "gemm: null matrix pointer");
  return g;
}

}  // namespace trainer

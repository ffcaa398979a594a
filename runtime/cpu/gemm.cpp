// gemm() for float and double through OpenBLAS, one cblas call per batch entry.
#include <cblas.h>

#include "runtime/core/check.h"
#include "runtime/cpu/ops_gemm.h"

namespace trainer::cpu {
namespace {

// Fills packed leading dimensions and rejects shapes cblas would only complain about on stderr.
template <class Real>
GemmArgs<Real> checked(GemmArgs<Real> g) {
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

CBLAS_TRANSPOSE op(bool trans) {
  return trans ? CblasTrans : CblasNoTrans;
}

}  // namespace

void gemm(const GemmArgs<float>& args) {
  const GemmArgs<float> g = checked(args);
  if (g.m == 0 || g.n == 0) return;
  for (int64_t i = 0; i < g.batch; ++i)
    cblas_sgemm(CblasRowMajor, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k, g.alpha,
                g.a + i * g.stride_a, g.lda, g.b + i * g.stride_b, g.ldb, g.beta,
                g.c + i * g.stride_c, g.ldc);
}

void gemm(const GemmArgs<double>& args) {
  const GemmArgs<double> g = checked(args);
  if (g.m == 0 || g.n == 0) return;
  for (int64_t i = 0; i < g.batch; ++i)
    cblas_dgemm(CblasRowMajor, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k, g.alpha,
                g.a + i * g.stride_a, g.lda, g.b + i * g.stride_b, g.ldb, g.beta,
                g.c + i * g.stride_c, g.ldc);
}

}  // namespace trainer::cpu

// gemm() for float and double through OpenBLAS, one cblas call per batch entry.
#include <cblas.h>

#include "runtime/core/check.h"
#include "runtime/core/gemm_args.h"
#include "runtime/cpu/ops_gemm.h"

namespace trainer::cpu {
namespace {

CBLAS_TRANSPOSE op(bool trans) {
  return trans ? CblasTrans : CblasNoTrans;
}

}  // namespace

void gemm(const GemmArgs<float>& args) {
  const GemmArgs<float> g = packed_gemm_args(args);
  if (g.m == 0 || g.n == 0) return;
  for (int64_t i = 0; i < g.batch; ++i)
    cblas_sgemm(CblasRowMajor, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k, g.alpha,
                g.a + i * g.stride_a, g.lda, g.b + i * g.stride_b, g.ldb, g.beta,
                g.c + i * g.stride_c, g.ldc);
}

void gemm(const GemmArgs<double>& args) {
  const GemmArgs<double> g = packed_gemm_args(args);
  if (g.m == 0 || g.n == 0) return;
  for (int64_t i = 0; i < g.batch; ++i)
    cblas_dgemm(CblasRowMajor, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k, g.alpha,
                g.a + i * g.stride_a, g.lda, g.b + i * g.stride_b, g.ldb, g.beta,
                g.c + i * g.stride_c, g.ldc);
}

}  // namespace trainer::cpu

#pragma once
// GEMM and the linear layer (matmul) of the cpu reference, templated on the scalar type.
// gemm() is an overload set over float (cblas_sgemm) and double (cblas_dgemm).
#include <cstdint>

#include "runtime/cpu/ops_common.h"

namespace trainer::cpu {

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major, op(X) = X or X^T; `batch` matrices at
// element strides stride_a/b/c. A leading dimension of 0 means "packed" (the row length).
template <class Real>
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  Real alpha = 1, beta = 0;
  const Real* a = nullptr;
  const Real* b = nullptr;
  Real* c = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

void gemm(const GemmArgs<float>& g);
void gemm(const GemmArgs<double>& g);

// out[N,OC] = inp[N,C] weight[OC,C]^T + bias[OC] + residual[N,OC]   (bias and residual may be
// null; residual may be out itself)
template <class Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int64_t N,
                    int64_t C, int64_t OC, const Real* residual = nullptr) {
  if (bias || residual) {  // out starts as bias + residual, and the GEMM adds to it (beta 1)
    TRAINER_PARALLEL_FOR_IF(N * OC >= kParallelMinWork)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < OC; ++o)
        out[i * OC + o] = (bias ? bias[o] : Real(0)) + (residual ? residual[i * OC + o] : Real(0));
  }
  GemmArgs<Real> g;
  g.trans_b = true;
  g.m = N, g.n = OC, g.k = C;
  g.beta = bias || residual ? Real(1) : Real(0);
  g.a = inp, g.b = weight, g.c = out;
  gemm(g);
}

// dbias[OC] += sum over rows of dout[N,OC], rows summed in order (deterministic).
template <class Real>
void bias_backward(Real* dbias, const Real* dout, int64_t N, int64_t OC) {
  TRAINER_PARALLEL_FOR_IF(N * OC >= kParallelMinWork)
  for (int64_t blk = 0; blk < column_blocks(OC); ++blk) {
    const int64_t o0 = block_begin(blk), o1 = block_end(blk, OC);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = o0; o < o1; ++o) dbias[o] += dout[i * OC + o];
  }
}

// dinp[N,C] += dout[N,OC] weight[OC,C]; dweight[OC,C] += dout^T inp; dbias[OC] += sum_rows(dout).
// Any gradient pointer may be null (not needed). dinp_beta 0 overwrites dinp instead.
template <class Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int64_t N, int64_t C, int64_t OC, Real dinp_beta = 1) {
  if (dinp) {
    GemmArgs<Real> g;
    g.m = N, g.n = C, g.k = OC, g.beta = dinp_beta;
    g.a = dout, g.b = weight, g.c = dinp;
    gemm(g);
  }
  if (dweight) {
    GemmArgs<Real> g;
    g.trans_a = true;
    g.m = OC, g.n = C, g.k = N, g.beta = 1;
    g.a = dout, g.b = inp, g.c = dweight;
    gemm(g);
  }
  if (dbias) bias_backward(dbias, dout, N, OC);
}

}  // namespace trainer::cpu

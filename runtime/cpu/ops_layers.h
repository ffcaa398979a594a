#pragma once
// LayerNorm, GELU and the token + position embedding of the cpu reference (GPT-2 numerics),
// templated on the scalar type. Backward functions ACCUMULATE (+=); null gradient = not needed.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "runtime/cpu/ops_common.h"

namespace trainer::cpu {

inline constexpr double kLayerNormEps = 1e-5;

// out[N,C] = (inp - mean) * rstd * weight + bias, biased variance, eps 1e-5. mean[N], rstd[N]
// are saved for backward (either may be null); bias may be null.
template <class Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int64_t N, int64_t C) {
  TRAINER_PARALLEL_FOR_IF(N * C >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const Real* x = inp + i * C;
    Real m = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= Real(C);
    Real var = 0;
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= Real(C);
    const Real s = Real(1) / std::sqrt(var + Real(kLayerNormEps));
    Real* y = out + i * C;
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + (bias ? bias[c] : Real(0));
    if (mean) mean[i] = m;
    if (rstd) rstd[i] = s;
  }
}

// dinp[N,C] += ...; dweight[C] += sum_rows(dout * norm); dbias[C] += sum_rows(dout).
// The parameter gradients sum rows in a fixed order (parallel over column blocks).
template <class Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int64_t N,
                        int64_t C) {
  const bool parallel = N * C >= kParallelMinWork;
  if (dinp) {
    TRAINER_PARALLEL_FOR_IF(parallel)
    for (int64_t i = 0; i < N; ++i) {
      const Real *x = inp + i * C, *dy = dout + i * C;
      const Real m = mean[i], s = rstd[i];
      Real dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int64_t c = 0; c < C; ++c) {
        const Real dnorm = weight[c] * dy[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * (x[c] - m) * s;
      }
      dnorm_mean /= Real(C);
      dnorm_norm_mean /= Real(C);
      for (int64_t c = 0; c < C; ++c) {
        const Real norm = (x[c] - m) * s;
        dinp[i * C + c] += (weight[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
  if (!dweight && !dbias) return;
  TRAINER_PARALLEL_FOR_IF(parallel)
  for (int64_t blk = 0; blk < column_blocks(C); ++blk) {
    const int64_t c0 = block_begin(blk), c1 = block_end(blk, C);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = c0; c < c1; ++c) {
        const Real dy = dout[i * C + c];
        if (dweight) dweight[c] += dy * (inp[i * C + c] - mean[i]) * rstd[i];
        if (dbias) dbias[c] += dy;
      }
  }
}

template <class Real>
inline constexpr Real kGeluScale = std::numbers::inv_sqrtpi_v<Real>* std::numbers::sqrt2_v<Real>;

// GPT-2's tanh approximation, gelu(x) = 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
// evaluated as x * sigmoid(2u) = x / (1 + exp(-2u)): the same function, without the cancellation in
// 1 + tanh(u) for negative x, and one exp in place of tanh (glibc's tanhf costs ~5x its expf).
// gelu_exp(x) is that exp(-2u). In float it overflows to +inf for x below about -10, where the
// division gives -0 for a true value under 1e-37 in magnitude.
template <class Real>
Real gelu_exp(Real x) {
  const Real s = kGeluScale<Real>, k = Real(0.044715);
  return std::exp(Real(-2) * s * (x + k * x * x * x));
}

template <class Real>
void gelu_forward(Real* out, const Real* inp, int64_t n) {
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] / (Real(1) + gelu_exp(inp[i]));
}

// gelu'(x) = sig + x sig (1 - sig) 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2), sig = sigmoid(2u)
template <class Real>
Real gelu_derivative(Real x) {
  const Real s = kGeluScale<Real>, k = Real(0.044715);
  const Real sig = Real(1) / (Real(1) + gelu_exp(x));
  // x * sig first: where sig is 0 (x below about -10 in float) the product is 0 before it meets
  // the x^2 factor, whose product with x overflows for |x| above ~1e13 (0 * inf would be NaN)
  return sig + x * sig * (Real(1) - sig) * Real(2) * s * (Real(1) + Real(3) * k * x * x);
}

// dinp[n] += gelu'(inp) * dout
template <class Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n) {
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) dinp[i] += gelu_derivative(inp[i]) * dout[i];
}

// g[n] *= gelu'(inp): a gradient carried back through the GELU in place (matmul_gelu_backward)
template <class Real>
void gelu_backward_in_place(Real* g, const Real* inp, int64_t n) {
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) g[i] *= gelu_derivative(inp[i]);
}

// out[B,T,C] = wte[tokens[b,t]] + wpe[pos_offset + t]; wpe may be null. Tokens must be < V; a
// negative one has no row (a vocabulary-parallel shard's other rows): out gets wpe only.
template <class Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe,
                       int64_t pos_offset, int64_t B, int64_t T, int64_t C) {
  TRAINER_PARALLEL_FOR_IF(B * T * C >= kParallelMinWork)
  for (int64_t i = 0; i < B * T; ++i) {
    const Real* e = tokens[i] >= 0 ? wte + int64_t{tokens[i]} * C : nullptr;  // (< 0: no row)
    const Real* p = wpe ? wpe + (pos_offset + i % T) * C : nullptr;
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = (e ? e[c] : Real(0)) + (p ? p[c] : Real(0));
  }
}

// dwte[V,C] += scatter of dout rows by token (a negative token: none); dwpe[pos_offset + t] +=
// sum_b dout[b,t]. Both sum in a fixed order: dwte parallel over column blocks, dwpe over
// positions.
template <class Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens,
                        int64_t pos_offset, int64_t B, int64_t T, int64_t C) {
  const bool parallel = B * T * C >= kParallelMinWork;
  if (dwte) {
    TRAINER_PARALLEL_FOR_IF(parallel)
    for (int64_t blk = 0; blk < column_blocks(C); ++blk) {
      const int64_t c0 = block_begin(blk), c1 = block_end(blk, C);
      for (int64_t i = 0; i < B * T; ++i) {
        if (tokens[i] < 0) continue;  // no row here (another vocabulary shard's)
        Real* g = dwte + int64_t{tokens[i]} * C;
        for (int64_t c = c0; c < c1; ++c) g[c] += dout[i * C + c];
      }
    }
  }
  if (dwpe) {
    TRAINER_PARALLEL_FOR_IF(parallel)
    for (int64_t t = 0; t < T; ++t) {
      Real* g = dwpe + (pos_offset + t) * C;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) g[c] += dout[(b * T + t) * C + c];
    }
  }
}

}  // namespace trainer::cpu

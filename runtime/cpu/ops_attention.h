#pragma once
// Causal multi-head self-attention of the cpu reference (llm.c layout), templated on the scalar
// type. qkv[B,T,3C] holds q | k | v along the last dim, each [NH,HS] with C = NH*HS.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/cpu/ops_common.h"

namespace trainer::cpu {

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
    for (int64_t t = 0; t < T; ++t) {
      const Real* q = qkv + (b * T + t) * C3 + h * HS;
      Real* a = att + (bh * T + t) * T;
      Real maxv = -std::numeric_limits<Real>::infinity();
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        const Real* k = qkv + (b * T + t2) * C3 + C + h * HS;
        Real dot = 0;
        TRAINER_SIMD_SUM(dot)
        for (int64_t i = 0; i < HS; ++i) dot += q[i] * k[i];
        a[t2] = dot * scale;
        maxv = std::max(maxv, a[t2]);
      }
      Real sum = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) sum += (a[t2] = std::exp(a[t2] - maxv));
      const Real inv = Real(1) / sum;
      for (int64_t t2 = 0; t2 < T; ++t2) a[t2] = t2 <= t ? a[t2] * inv : Real(0);
      Real* o = out + (b * T + t) * C + h * HS;
      for (int64_t i = 0; i < HS; ++i) o[i] = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        const Real* v = qkv + (b * T + t2) * C3 + 2 * C + h * HS;
        TRAINER_SIMD
        for (int64_t i = 0; i < HS; ++i) o[i] += a[t2] * v[i];
      }
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
    std::vector<Real> datt(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const Real* a = att + (bh * T + t) * T;
      const Real* dy = dout + (b * T + t) * C + h * HS;
      const int64_t qoff = (b * T + t) * C3 + h * HS;
      Real datt_dot_att = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        const int64_t voff = (b * T + t2) * C3 + 2 * C + h * HS;
        Real d = 0;
        TRAINER_SIMD_SUM(d)
        for (int64_t i = 0; i < HS; ++i) {
          d += dy[i] * qkv[voff + i];
          dqkv[voff + i] += a[t2] * dy[i];
        }
        datt[static_cast<size_t>(t2)] = d;
        datt_dot_att += d * a[t2];
      }
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        const int64_t koff = (b * T + t2) * C3 + C + h * HS;
        const Real dpre = a[t2] * (datt[static_cast<size_t>(t2)] - datt_dot_att) * scale;
        TRAINER_SIMD
        for (int64_t i = 0; i < HS; ++i) {
          dqkv[qoff + i] += dpre * qkv[koff + i];
          dqkv[koff + i] += dpre * qkv[qoff + i];
        }
      }
    }
  }
}

}  // namespace trainer::cpu

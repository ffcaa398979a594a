#pragma once
// AdamW, reductions and bf16 rounding of the cpu reference.
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/cpu/ops_common.h"

namespace trainer::cpu {

// AdamW on n elements, decoupled weight decay, bias correction with the 1-based `step`, on the
// gradients times grad_scale, g = grads * grad_scale:
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (mhat / (sqrt(vhat) + eps) + wd p).
template <class Real>
void adamw_step(Real* params, const Real* grads, Real* m, Real* v, int64_t n, Real lr, Real beta1,
                Real beta2, Real eps, Real weight_decay, int64_t step, Real grad_scale = 1) {
  const Real bc1 = Real(1 - std::pow(double(beta1), double(step)));
  const Real bc2 = Real(1 - std::pow(double(beta2), double(step)));
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const Real g = grads[i] * grad_scale;
    m[i] = beta1 * m[i] + (Real(1) - beta1) * g;
    v[i] = beta2 * v[i] + (Real(1) - beta2) * g * g;
    const Real mhat = m[i] / bc1, vhat = v[i] / bc2;
    params[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * params[i]);
  }
}

// sum of f(x[i]) in fp64. Fixed-size chunks reduced in chunk order: the same bits for any
// thread count.
template <class Real, class F>
double chunked_sum(const Real* x, int64_t n, F f) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  TRAINER_PARALLEL_FOR_IF(chunks > 1)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    double s = 0;
    for (int64_t i = ch * kChunk; i < std::min(n, (ch + 1) * kChunk); ++i) s += f(double(x[i]));
    partial[static_cast<size_t>(ch)] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

template <class Real>
double sum_squares(const Real* x, int64_t n) {
  return chunked_sum(x, n, [](double a) { return a * a; });
}

template <class Real>
double sum(const Real* x, int64_t n) {
  return chunked_sum(x, n, [](double a) { return a; });
}

// fp32 -> bf16 bits, round to nearest even. NaN stays a (quiet) NaN with its sign; infinities
// stay infinite; finite values past the largest bf16 round to infinity, as IEEE rounding does.
inline uint16_t bf16_bits_from_float(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float float_from_bf16_bits(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline float round_to_bf16(float f) {
  return float_from_bf16_bits(bf16_bits_from_float(f));
}

}  // namespace trainer::cpu

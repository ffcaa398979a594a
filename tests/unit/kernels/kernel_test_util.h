#pragma once
// Helpers of the kernel tests (tests/unit/kernels, and tests/unit/cuda): seeded inputs, host
// tensors, the worst relative error and its Catch2 check, and the float64 row log-sum-exp that
// the flash attention kernels keep.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/cpu/ops_optim.h"

namespace trainer::kernel_test {

inline std::vector<float> randoms(int64_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// bf16 bits of fp32 values, rounded as the cpu backend rounds, and the values of bf16 bits.
inline std::vector<uint16_t> bf16_bits_of(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = cpu::bf16_bits_from_float(v[i]);
  return b;
}
inline std::vector<float> floats_of(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = cpu::float_from_bf16_bits(b[i]);
  return v;
}

inline Tensor host(std::vector<float>& v, Shape s) {
  return Tensor(v.data(), s);
}
inline Tensor host(std::vector<int32_t>& v, Shape s) {
  return Tensor(v.data(), s, DType::i32);
}

// n NaNs: the start of every output a kernel must write.
inline std::vector<float> nans(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), std::nanf(""));
}

// max |got - want| / max |want|; a non-finite element on either side counts as 1e30.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 1e-30;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const bool finite = std::isfinite(got[i]) && std::isfinite(want[i]);
    const double e = finite ? std::fabs(double(got[i]) - want[i]) / scale : 1e30;
    worst = std::max(worst, e);
  }
  return worst;
}

// max |got - want| / max |want| below tol, NaN-aware (a non-finite element on either side fails
// it); prints the worst element of both sides.
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                        const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0, scale = 1e-30;
  size_t at = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::isfinite(got[i]) && std::isfinite(want[i])
                         ? std::fabs(double(got[i]) - want[i]) / scale
                         : std::numeric_limits<double>::infinity();
    if (!(e <= worst)) worst = e, at = i;
  }
  INFO(what << ": worst relative error " << worst << " at [" << at << "]: got " << got[at]
            << " vs cpu " << want[at] << " (tolerance " << tol << ", " << want.size()
            << " elements)");
  CHECK(worst < tol);
}

// Each row's log-sum-exp of the scaled causal scores of qkv [B,T,3C], in float64: [B,NH,T].
inline std::vector<float> lse_float64(const std::vector<float>& qkv, int64_t B, int64_t T,
                                      int64_t NH, int64_t HS) {
  const int64_t C = NH * HS;
  std::vector<float> lse(static_cast<size_t>(B * NH * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double dot = 0;
          for (int64_t d = 0; d < HS; ++d)
            dot += double(qkv[static_cast<size_t>((b * T + t) * 3 * C + h * HS + d)]) *
                   qkv[static_cast<size_t>((b * T + t2) * 3 * C + C + h * HS + d)];
          s.push_back(dot / std::sqrt(double(HS)));
        }
        double mx = -1e300, sum = 0;
        for (double v : s) mx = std::max(mx, v);
        for (double v : s) sum += std::exp(v - mx);
        lse[static_cast<size_t>((b * NH + h) * T + t)] = float(mx + std::log(sum));
      }
  return lse;
}

}  // namespace trainer::kernel_test

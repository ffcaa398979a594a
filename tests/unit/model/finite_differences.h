#pragma once
// What the model's gradient tests share: a small random batch, random weights, and the check of
// an analytic gradient against central finite differences of a float64 loss.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/model/param_layout.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::testing {

// B sequences of T random tokens and targets below `vocab`.
struct TokenBatch {
  int B = 2, T = 5;
  std::vector<int32_t> inputs, targets;
  explicit TokenBatch(int vocab = 11, int b = 2, int t = 5) : B(b), T(t) {
    SplitMix64 rng(99);
    for (int i = 0; i < B * T; ++i) {
      inputs.push_back(static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab)));
      targets.push_back(static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab)));
    }
  }
};

// Random (not GPT-2 init) weights of a larger scale so every path carries signal: zero biases
// and unit norms would hide their own gradient bugs.
inline std::vector<float> random_params(int64_t n) {
  SplitMix64 rng(5);
  std::vector<float> p(static_cast<size_t>(n));
  for (float& v : p) v = static_cast<float>(0.3 * rng.normal());
  return p;
}

// For each tensor of `layout`: the relative L2 error of `analytic` (the flat fp32 gradient)
// against central differences (step h, cpu::test::fd_gradient) of loss64(), which reads the
// float64 parameters `p64` (moved and restored there), must stay below `tol`.
template <class Loss>
void check_gradient_against_finite_differences(const model::ParamLayout& layout,
                                               std::vector<double>& p64,
                                               const std::vector<float>& analytic, Loss loss64,
                                               double tol = 1e-4, double h = 1e-6) {
  const std::vector<double> fd = cpu::test::fd_gradient(p64, loss64, h);
  for (const auto& spec : layout.params()) {
    double num = 0, den = 0, max_abs = 0;
    for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
      const size_t k = static_cast<size_t>(i);
      const double diff = analytic[k] - fd[k];
      num += diff * diff;
      den += fd[k] * fd[k];
      max_abs = std::max(max_abs, std::abs(diff));
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
    INFO(spec.name << ": relative error " << rel << " (max abs " << max_abs << ", |fd| "
                   << std::sqrt(den) << ")");
    CHECK(rel < tol);
  }
}

}  // namespace trainer::testing

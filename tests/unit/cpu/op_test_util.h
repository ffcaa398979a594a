#pragma once
// Helpers of the cpu op tests: seeded inputs, float64 central differences, gradient buffers
// that start from a random prior (so every gradient check also proves += semantics) or from NaN
// (an overwritten gradient: any read of the old value shows), and a norm-wise gradient comparison
// that prints both sides.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"

namespace trainer::cpu::test {

// int64_t sizes -> vector sizes (a function, not a cast, so declarations never parse as
// function declarations).
inline size_t sz(int64_t n) {
  return static_cast<size_t>(n);
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline Tensor tensor(std::vector<float>& v, Shape s) {
  return Tensor(v.data(), s, DType::f32);
}
inline Tensor tensor(std::vector<int32_t>& v, Shape s) {
  return Tensor(v.data(), s, DType::i32);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d loss / d x[i] by central differences in float64; x is perturbed in place and restored.
inline std::vector<double> fd_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                       double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss();
    x[i] = x0 - h;
    const double down = loss();
    x[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// A gradient buffer pre-filled with a random prior: backward must add to it, not overwrite.
struct GradBuf {
  std::vector<float> prior, g;
  GradBuf(size_t n, uint32_t seed) : prior(random_floats(n, seed)), g(prior) {}
  Tensor t(Shape s) { return tensor(g, s); }
  std::vector<double> added() const {
    std::vector<double> d(g.size());
    for (size_t i = 0; i < g.size(); ++i) d[i] = double(g[i]) - double(prior[i]);
    return d;
  }
};

// A gradient the op overwrites (backend.h): pre-filled with NaN, which an accumulation or an
// element left unwritten carries into the check.
struct OverwrittenGrad {
  std::vector<float> g;
  explicit OverwrittenGrad(size_t n) : g(n, std::nanf("")) {}
  Tensor t(Shape s) { return tensor(g, s); }
  std::vector<double> values() const { return {g.begin(), g.end()}; }
};

struct GradError {
  double rel = 0, max_abs = 0, ref_norm = 0;
};

inline GradError grad_error(const std::vector<double>& got, const std::vector<double>& ref) {
  GradError e;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = got[i] - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
  }
  e.ref_norm = std::sqrt(ref2);
  e.rel = std::sqrt(diff2) / e.ref_norm;
  return e;
}

inline std::string head(const std::vector<double>& v, size_t n = 6) {
  std::string s;
  for (size_t i = 0; i < std::min(n, v.size()); ++i) s += std::to_string(v[i]) + " ";
  return s;
}

// ||got - ref|| / ||ref|| < tol, printing the error, the max elementwise difference and both
// vectors' first entries.
inline void check_gradient(const std::string& name, const std::vector<double>& got,
                           const std::vector<double>& ref, double tol = 1e-4) {
  REQUIRE(got.size() == ref.size());
  const GradError e = grad_error(got, ref);
  INFO(name << ": relative error " << e.rel << ", max |diff| " << e.max_abs << ", |ref| "
            << e.ref_norm << "\n  analytic fp32: " << head(got)
            << "\n  fd float64:    " << head(ref));
  CHECK(e.ref_norm > 0);
  CHECK(e.rel < tol);
}

// Elementwise |got - ref| <= atol + rtol |ref|, printing the worst entry.
template <class A, class B>
void check_close(const std::string& name, const std::vector<A>& got, const std::vector<B>& ref,
                 double rtol, double atol) {
  REQUIRE(got.size() == ref.size());
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double excess =
        std::abs(double(got[i]) - double(ref[i])) - (atol + rtol * std::abs(double(ref[i])));
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  INFO(name << ": worst entry " << worst << ": got " << double(got[worst]) << " vs reference "
            << double(ref[worst]));
  CHECK(worst_excess <= 0);
}

}  // namespace trainer::cpu::test

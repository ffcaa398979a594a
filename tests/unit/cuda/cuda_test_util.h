#pragma once
// Helpers of the cuda op tests: each op runs on the cpu backend (the reference) and on the cuda
// backend from the same random inputs; outputs start as NaN on the device so an op that skips an
// element fails. Without a device every test prints "SKIPPED: no CUDA device (reason)" and
// returns (Catch2 v2 has no SKIP; ctest marks it skipped through SKIP_REGULAR_EXPRESSION).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops_optim.h"

namespace trainer::cuda::test {

// The cuda backend, or null after printing why it cannot run here.
inline std::unique_ptr<Backend> cuda_or_skip() {
  std::string reason = "cuda_backend_available() is false";
  if (cuda_backend_available()) {
    try {
      return make_backend("cuda", 0);
    } catch (const std::exception& e) {
      reason = e.what();
    }
  } else {
    try {
      make_backend("cuda", 0);
    } catch (const std::exception& e) {
      reason = e.what();
    }
  }
  WARN("SKIPPED: no CUDA device (" << reason << ")");
  return nullptr;
}

inline std::vector<float> randoms(int64_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// A device copy of a host vector (freed with the backend's arena when the backend goes).
template <class T>
Tensor upload(Backend& be, const std::vector<T>& host, Shape s, DType t) {
  Tensor d(be.alloc(host.size() * sizeof(T)), s, t, DeviceType::cuda);
  be.from_host(d, host.data());
  return d;
}
inline Tensor upload(Backend& be, const std::vector<float>& h, Shape s) {
  return upload(be, h, s, DType::f32);
}
inline Tensor upload(Backend& be, const std::vector<int32_t>& h, Shape s) {
  return upload(be, h, s, DType::i32);
}
// An output buffer full of NaN.
inline Tensor poisoned(Backend& be, Shape s) {
  return upload(be, std::vector<float>(static_cast<size_t>(s.numel()), std::nanf("")), s);
}
inline std::vector<float> download(Backend& be, const Tensor& d) {
  std::vector<float> h(static_cast<size_t>(d.numel()));
  be.to_host(h.data(), d);
  return h;
}
inline Tensor host(std::vector<float>& v, Shape s) {
  return Tensor(v.data(), s, DType::f32);
}
inline Tensor host(std::vector<int32_t>& v, Shape s) {
  return Tensor(v.data(), s, DType::i32);
}

// max |got - want| / max |want|, NaN-aware; prints the worst element of both sides on failure.
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                        const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0, scale = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::fabs(double(want[i])));
  scale = std::max(scale, 1e-30);
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::fabs(double(got[i]) - want[i]) / scale
                                           : std::numeric_limits<double>::infinity();
    if (!(e <= worst)) worst = e, at = i;
  }
  INFO(what << ": worst relative error " << worst << " at [" << at << "]: cuda " << got[at]
            << " vs cpu " << want[at] << " (tolerance " << tol << ", " << want.size()
            << " elements)");
  CHECK(worst < tol);
}

inline constexpr double kF32Tol = 1e-5;
inline constexpr double kBf16Tol = 1e-2;

// bf16 helpers: host rounding (the cpu backend's), a bf16 output full of NaN, and its values.
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
inline Tensor poisoned_bf16(Backend& be, Shape s) {
  return upload(be, std::vector<uint16_t>(static_cast<size_t>(s.numel()), 0x7fc0), s, DType::bf16);
}
inline std::vector<float> download_bf16(Backend& be, const Tensor& d) {
  std::vector<uint16_t> h(static_cast<size_t>(d.numel()));
  be.to_host(h.data(), d);
  return floats_of(h);
}
inline Tensor host_bf16(std::vector<uint16_t>& v, Shape s) {
  return Tensor(v.data(), s, DType::bf16);
}

}  // namespace trainer::cuda::test

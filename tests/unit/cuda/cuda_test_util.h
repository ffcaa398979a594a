#pragma once
// Helpers of the cuda op tests: each op runs on the cpu backend (the reference) and on the cuda
// backend from the same random inputs; outputs start as NaN on the device so an op that skips an
// element fails. Without a device every test prints "SKIPPED: no CUDA device (reason)" and
// returns (Catch2 v2 has no SKIP; ctest marks it skipped through SKIP_REGULAR_EXPRESSION).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops_optim.h"
#include "tests/unit/kernels/kernel_test_util.h"

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

// The cuda backend with TRAINER_ATTENTION set to `kernel` (restored after), or null as above.
inline std::unique_ptr<Backend> cuda_with_attention(const char* kernel) {
  const char* old = std::getenv("TRAINER_ATTENTION");
  const std::string saved = old ? old : "";
  setenv("TRAINER_ATTENTION", kernel, 1);
  auto be = cuda_or_skip();
  if (old)
    setenv("TRAINER_ATTENTION", saved.c_str(), 1);
  else
    unsetenv("TRAINER_ATTENTION");
  return be;
}

using kernel_test::check_close;
using kernel_test::randoms;

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

inline constexpr double kF32Tol = 1e-5;
inline constexpr double kBf16Tol = 1e-2;

// bf16 helpers: host rounding and values (kernel_test_util.h), a bf16 output full of NaN, and
// its values.
using kernel_test::bf16_bits_of;
using kernel_test::floats_of;
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

// The same in either dtype (f32, or bf16 for the tests of bf16 compute).
// A device copy in `t`'s dtype of fp32 host values (bf16: rounded like the cpu backend).
inline Tensor upload_as(Backend& be, const std::vector<float>& v, Shape s, DType t) {
  return t == DType::bf16 ? upload(be, bf16_bits_of(v), s, DType::bf16) : upload(be, v, s);
}
inline Tensor poisoned_as(Backend& be, Shape s, DType t) {
  return t == DType::bf16 ? poisoned_bf16(be, s) : poisoned(be, s);
}
inline std::vector<float> download_as(Backend& be, const Tensor& d) {
  return d.dtype == DType::bf16 ? download_bf16(be, d) : download(be, d);
}

// Host operands of the cpu reference, in dtype t (bf16 values kept as bits in `bits`).
struct HostOperand {
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  HostOperand(const std::vector<float>& v, DType t) : f32(v) {
    if (t == DType::bf16) bits = bf16_bits_of(v);
  }
  Tensor t(Shape s) { return bits.empty() ? host(f32, s) : host_bf16(bits, s); }
  std::vector<float> values() const { return bits.empty() ? f32 : floats_of(bits); }
};

}  // namespace trainer::cuda::test

#pragma once
// Helpers of the cpu bf16 tests: host bf16 bits from fp32 values (rounded to nearest even, as the
// cpu backend rounds), their values back, bf16 host tensors, and a bit-for-bit comparison.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/cpu/ops.h"

namespace trainer::cpu::test {

inline std::vector<uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16_bits_from_float(v[i]);
  return b;
}

inline std::vector<float> widened(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = float_from_bf16_bits(b[i]);
  return v;
}

inline std::vector<float> rounded(const std::vector<float>& v) {
  return widened(to_bits(v));
}

inline Tensor bf16(std::vector<uint16_t>& b, Shape s) {
  return Tensor(b.data(), s, DType::bf16);
}

inline void check_bitwise(const std::vector<float>& got, const std::vector<float>& want,
                          const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
}

}  // namespace trainer::cpu::test

#pragma once
// Helpers of the cpu bf16 tests: host bf16 bits from fp32 values and their values back (from
// kernel_test_util.h), values rounded to bf16, bf16 host tensors, and a bit-for-bit comparison.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/core/tensor.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace trainer::cpu::test {

using kernel_test::bf16_bits_of;
using kernel_test::floats_of;

inline std::vector<float> rounded(const std::vector<float>& v) {
  return floats_of(bf16_bits_of(v));
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

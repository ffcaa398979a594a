// fp8 e4m3 rounding, the delayed-scaling rule and the cpu backend's emulated fp8 GEMM
// (runtime/core/fp8_recipe.h), the reference of the cuda fp8 path.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/fp8.h"
#include "runtime/cpu/ops_optim.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::cpu::test {
namespace {

TEST_CASE("fp8_e4m3_known_values_saturation_and_nan", "[cpu][fp8]") {
  CHECK(fp8_e4m3_from_float(0.0f) == 0x00);
  CHECK(fp8_e4m3_from_float(-0.0f) == 0x80);
  CHECK(fp8_e4m3_from_float(1.0f) == 0x38);  // exponent 7 (bias 7), mantissa 0
  CHECK(fp8_e4m3_from_float(-1.0f) == 0xb8);
  CHECK(fp8_e4m3_from_float(1.125f) == 0x39);  // one mantissa step at 1 is 1/8
  CHECK(fp8_e4m3_from_float(448.0f) == 0x7e);  // largest finite
  CHECK(fp8_e4m3_from_float(1e6f) == 0x7e);    // saturates
  CHECK(fp8_e4m3_from_float(-INFINITY) == 0xfe);
  CHECK(fp8_e4m3_from_float(std::nanf("")) == 0x7f);
  CHECK(fp8_e4m3_from_float(std::ldexp(1.0f, -6)) == 0x08);  // smallest normal
  CHECK(fp8_e4m3_from_float(std::ldexp(1.0f, -9)) == 0x01);  // smallest subnormal
  // Ties go to even: half the smallest subnormal to 0, 1.5 of it to 2, and 1 + 1/16 to 1.
  CHECK(fp8_e4m3_from_float(std::ldexp(1.0f, -10)) == 0x00);
  CHECK(fp8_e4m3_from_float(std::ldexp(3.0f, -10)) == 0x02);
  CHECK(fp8_e4m3_from_float(1.0625f) == 0x38);
  CHECK(fp8_e4m3_from_float(1.1875f) == 0x3a);               // between 1.125 (odd) and 1.25 (even)
  CHECK(fp8_e4m3_from_float(std::ldexp(7.5f, -9)) == 0x08);  // a tie, to even: the smallest normal
  CHECK(float_from_fp8_e4m3(0x7e) == 448.0f);
  CHECK(std::isnan(float_from_fp8_e4m3(0x7f)));
  CHECK(float_from_fp8_e4m3(0x01) == std::ldexp(1.0f, -9));
}

TEST_CASE("fp8_e4m3_every_code_round_trips_and_midpoints_round_to_even", "[cpu][fp8]") {
  std::vector<float> positives;  // the finite non-negative values, ascending
  for (int b = 0; b < 0x7f; ++b) positives.push_back(float_from_fp8_e4m3(static_cast<uint8_t>(b)));
  for (int b = 0; b < 256; ++b) {
    const auto bits = static_cast<uint8_t>(b);
    if ((bits & 0x7f) == 0x7f) continue;  // NaN
    INFO("code " << b);
    CHECK(fp8_e4m3_from_float(float_from_fp8_e4m3(bits)) == bits);
  }
  for (size_t i = 0; i + 1 < positives.size(); ++i) {
    const float lo = positives[i], hi = positives[i + 1], mid = (lo + hi) / 2;
    INFO("between " << lo << " and " << hi);
    REQUIRE(lo < hi);
    CHECK(fp8_e4m3_from_float(std::nextafter(mid, 0.0f)) == i);
    CHECK(fp8_e4m3_from_float(std::nextafter(mid, 1e9f)) == i + 1);
    CHECK(fp8_e4m3_from_float(mid) == (i % 2 == 0 ? i : i + 1));  // the even code
  }
}

TEST_CASE("fp8_delayed_scaling_uses_the_history_before_the_call", "[cpu][fp8]") {
  std::vector<float> s(kFp8TensorFloats, 0.0f);
  // A fresh state quantizes its first call with that call's own amax (current scaling).
  CHECK(fp8_call_scale(s.data(), 2.0f) == 224.0f);
  CHECK(fp8_call_scale(s.data(), 0.0f) == 1.0f);
  CHECK(fp8_call_scale(s.data(), std::nanf("")) == 1.0f);
  // The call does not move the state; the (reduced) amax pushed after it does.
  fp8_push_amax(s.data(), 2.0f);
  CHECK(s[kFp8AmaxHistory] == 224.0f);
  CHECK(s[kFp8AmaxHistory + 1] == 1.0f / 224.0f);
  // Later calls quantize with the scale from before them, whatever their own amax.
  CHECK(fp8_call_scale(s.data(), 4.0f) == 224.0f);
  fp8_push_amax(s.data(), 4.0f);
  CHECK(s[kFp8AmaxHistory] == 112.0f);  // 448 / max(4, 2)
  CHECK(fp8_call_scale(s.data(), 1.0f) == 112.0f);
  fp8_push_amax(s.data(), 1.0f);
  CHECK(s[kFp8AmaxHistory] == 112.0f);  // 4 is still in the history
  CHECK(s[0] == 1.0f);
  CHECK(s[1] == 4.0f);
  CHECK(s[2] == 2.0f);
  // The 4 leaves the window after kFp8AmaxHistory pushes.
  for (int i = 0; i < kFp8AmaxHistory - 2; ++i) fp8_push_amax(s.data(), 1.0f);
  CHECK(s[kFp8AmaxHistory] == 112.0f);
  fp8_push_amax(s.data(), 1.0f);
  CHECK(s[kFp8AmaxHistory] == 448.0f);
  // A NaN amax is skipped by the max; an all-zero history keeps the scale, 1 for a fresh one.
  fp8_push_amax(s.data(), std::nanf(""));
  CHECK(s[kFp8AmaxHistory] == 448.0f);
  std::vector<float> zero(kFp8TensorFloats, 0.0f);
  fp8_push_amax(zero.data(), 0.0f);
  CHECK(zero[kFp8AmaxHistory] == 1.0f);
  CHECK(fp8_call_scale(zero.data(), 8.0f) == 1.0f);  // no longer fresh
}

// The bf16 bits of v's values (already bf16-representable after the rounding).
std::vector<uint16_t> bf16_bits(std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    b[i] = bf16_bits_from_float(v[i]);
    v[i] = float_from_bf16_bits(b[i]);
  }
  return b;
}

// A linear layer's operands for the fp8 GEMM: x[N,C] in [-3, 3] and w[OC,C] in [-w_range,
// w_range] as floats and as the bf16 the layer reads (tx, tw), and a bias b[OC]; seeds seed,
// seed + 1, seed + 2.
struct Fp8Operands {
  std::vector<float> x, w, b;
  std::vector<uint16_t> xb, wb;
  Tensor tx, tw;
  Fp8Operands(int64_t N, int64_t C, int64_t OC, uint32_t seed, float w_range)
      : x(random_floats(sz(N * C), seed, -3, 3)),
        w(random_floats(sz(OC * C), seed + 1, -w_range, w_range)),
        b(random_floats(sz(OC), seed + 2)),
        xb(bf16_bits(x)),
        wb(bf16_bits(w)),
        tx(xb.data(), {N, C}, DType::bf16),
        tw(wb.data(), {OC, C}, DType::bf16) {}
  Fp8Operands(const Fp8Operands&) = delete;  // tx and tw point into xb and wb
  Fp8Operands& operator=(const Fp8Operands&) = delete;
};

TEST_CASE("fp8_matmul_is_the_descaled_product_of_the_quantized_operands", "[cpu][fp8]") {
  const int64_t N = 6, C = 40, OC = 10;
  Fp8Operands ops(N, C, OC, 1, 0.05f);
  auto &x = ops.x, &w = ops.w, &b = ops.b;
  const Tensor &tx = ops.tx, &tw = ops.tw;
  std::vector<float> state(kFp8StateFloats, 0.0f), out(sz(N * OC), std::nanf(""));
  CpuBackend be;
  CHECK_FALSE(be.supports_fp8());  // emulated only: runs refuse fp8 on the cpu backend
  double amax_x = 0, amax_w = 0;
  for (float v : x) amax_x = std::max(amax_x, double(std::fabs(v)));
  for (float v : w) amax_w = std::max(amax_w, double(std::fabs(v)));
  const float sx = float(448.0 / amax_x), sw = float(448.0 / amax_w);  // fresh: current scaling
  std::vector<float> amax(2, std::nanf(""));
  for (int call = 0; call < 2; ++call) {  // the second call reuses the first call's scales
    be.matmul_forward_fp8(tensor(out, {N, OC}), tx, tw, tensor(b, {OC}),
                          tensor(state, {kFp8StateFloats}), tensor(amax, {2}));
    CHECK(amax[0] == float(amax_x));
    CHECK(amax[1] == float(amax_w));
    be.fp8_push_amaxes(tensor(state, {kFp8StateFloats}), tensor(amax, {2}));
    CHECK(state[kFp8AmaxHistory] == sx);
    CHECK(state[kFp8TensorFloats + kFp8AmaxHistory] == sw);
    double err2 = 0, ref2 = 0;
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < OC; ++c) {
        double q = 0, exact = 0;
        for (int64_t k = 0; k < C; ++k) {
          const float qx = float_from_fp8_e4m3(fp8_e4m3_from_float(x[sz(r * C + k)] * sx));
          const float qw = float_from_fp8_e4m3(fp8_e4m3_from_float(w[sz(c * C + k)] * sw));
          q += double(qx) * qw;
          exact += double(x[sz(r * C + k)]) * w[sz(c * C + k)];
        }
        const double want = q / sx / sw + b[sz(c)], got = out[sz(r * OC + c)];
        INFO("call " << call << " out[" << r << "," << c << "] " << got << " want " << want);
        REQUIRE(std::fabs(got - want) <= 1e-5 * (1 + std::fabs(want)));
        err2 += (got - exact - b[sz(c)]) * (got - exact - b[sz(c)]);
        ref2 += exact * exact;
      }
    // e4m3 keeps 3 mantissa bits: a relative error of a few percent, never more.
    const double rel = std::sqrt(err2 / ref2);
    INFO("relative L2 error against the unquantized product: " << rel);
    CHECK(rel < 0.08);
    CHECK(rel > 1e-4);
  }
  CHECK(state[kFp8AmaxHistory] == sx);
  CHECK(state[0] == float(amax_x));
  CHECK(state[1] == float(amax_x));
  CHECK(state[kFp8TensorFloats + kFp8AmaxHistory] == sw);
  // A call raises the amaxes, never lowers them: the calls between two pushes (a pipeline
  // schedule's pieces) report the max over all of their inputs.
  amax = {1e3f, 0.0f};
  be.matmul_forward_fp8(tensor(out, {N, OC}), tx, tw, tensor(b, {OC}),
                        tensor(state, {kFp8StateFloats}), tensor(amax, {2}));
  CHECK(amax[0] == 1e3f);
  CHECK(amax[1] == float(amax_w));
}

TEST_CASE("fp8_matmul_with_a_bf16_out_rounds_the_fp32_result_once", "[cpu][fp8]") {
  const int64_t N = 5, C = 32, OC = 12;
  Fp8Operands ops(N, C, OC, 4, 0.1f);
  std::vector<float> state(kFp8StateFloats, 0.0f), amax(2), out32(sz(N * OC));
  std::vector<uint16_t> out16(sz(N * OC), 0x7fc0);  // NaN: every element must be written
  CpuBackend be;
  be.matmul_forward_fp8(tensor(out32, {N, OC}), ops.tx, ops.tw, tensor(ops.b, {OC}),
                        tensor(state, {kFp8StateFloats}), tensor(amax, {2}));
  be.matmul_forward_fp8(Tensor(out16.data(), {N, OC}, DType::bf16), ops.tx, ops.tw,
                        tensor(ops.b, {OC}), tensor(state, {kFp8StateFloats}), tensor(amax, {2}));
  CHECK(out16 == bf16_bits(out32));
}

}  // namespace
}  // namespace trainer::cpu::test

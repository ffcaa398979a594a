// The mixed-precision contract of backend.h on the cpu backend: bf16 matmul operands give exactly
// the fp32 op on the widened values (dout rounded to bf16 for the GEMMs and dbias), and a bf16
// output is the fp32 result rounded once. The cuda backend is held to the same
// contract against this one (tests/unit/cuda/bf16_test.cpp).
#include <catch2/catch.hpp>

#include "runtime/core/check.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "tests/unit/cpu/bf16_test_util.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::cpu::test {
namespace {

TEST_CASE("bf16_matmul_operands_equal_fp32_matmul_on_the_rounded_values", "[cpu][bf16]") {
  CpuBackend be;
  const int64_t N = 9, C = 20, OC = 14;
  const auto x = random_floats(sz(N * C), 1), w = random_floats(sz(OC * C), 2);
  auto bias = random_floats(sz(OC), 3), dy = random_floats(sz(N * OC), 4);
  auto x16 = bf16_bits_of(x), w16 = bf16_bits_of(w);
  auto xr = floats_of(x16), wr = floats_of(w16), dyr = rounded(dy);

  std::vector<float> y(sz(N * OC)), y_ref(y.size());
  be.matmul_forward(tensor(y, {N, OC}), bf16(x16, {N, C}), bf16(w16, {OC, C}), tensor(bias, {OC}));
  be.matmul_forward(tensor(y_ref, {N, OC}), tensor(xr, {N, C}), tensor(wr, {OC, C}),
                    tensor(bias, {OC}));
  check_bitwise(y, y_ref, "forward");

  OverwrittenGrad dx(sz(N * C)), dx_ref(sz(N * C));
  GradBuf dw(sz(OC * C), 6), db(sz(OC), 7);
  GradBuf dw_ref = dw, db_ref = db;
  be.matmul_backward(dx.t({N, C}), dw.t({OC, C}), db.t({OC}), tensor(dy, {N, OC}),
                     bf16(x16, {N, C}), bf16(w16, {OC, C}));
  // Reference: the fp32 op on dout rounded to bf16, for the GEMMs and dbias alike (what the
  // cuda backend's bias-gradient epilogue sums).
  be.matmul_backward(dx_ref.t({N, C}), dw_ref.t({OC, C}), db_ref.t({OC}), tensor(dyr, {N, OC}),
                     tensor(xr, {N, C}), tensor(wr, {OC, C}));
  check_bitwise(dx.g, dx_ref.g, "dinp (dout rounded to bf16)");
  check_bitwise(dw.g, dw_ref.g, "dweight (dout rounded to bf16)");
  check_bitwise(db.g, db_ref.g, "dbias (dout rounded to bf16)");
  // ... and the rounding of dout is real: the fp32 dout gives a different dinp and dbias.
  OverwrittenGrad dx_fp32dy(sz(N * C));
  GradBuf db_fp32dy(sz(OC), 7);
  be.matmul_backward(dx_fp32dy.t({N, C}), Tensor(), db_fp32dy.t({OC}), tensor(dy, {N, OC}),
                     tensor(xr, {N, C}), tensor(wr, {OC, C}));
  CHECK(std::memcmp(dx.g.data(), dx_fp32dy.g.data(), dx.g.size() * sizeof(float)) != 0);
  CHECK(std::memcmp(db.g.data(), db_fp32dy.g.data(), db.g.size() * sizeof(float)) != 0);
}

TEST_CASE("bf16_outputs_are_the_fp32_results_rounded_once", "[cpu][bf16]") {
  CpuBackend be;
  const int64_t B = 2, T = 5, C = 12, NH = 3, N = B * T;
  const auto x = random_floats(sz(N * C), 11, -2, 2), w = random_floats(sz(C), 12);
  const auto b = random_floats(sz(C), 13);
  auto xm = x, wm = w, bm = b;
  std::vector<float> mean(sz(N)), rstd(sz(N));

  std::vector<float> ln(sz(N * C));
  std::vector<uint16_t> ln16(ln.size());
  be.layernorm_forward(tensor(ln, {N, C}), tensor(mean, {N}), tensor(rstd, {N}), tensor(xm, {N, C}),
                       tensor(wm, {C}), tensor(bm, {C}));
  be.layernorm_forward(bf16(ln16, {N, C}), tensor(mean, {N}), tensor(rstd, {N}), tensor(xm, {N, C}),
                       tensor(wm, {C}), tensor(bm, {C}));
  check_bitwise(floats_of(ln16), rounded(ln), "layernorm out");

  std::vector<float> ge(sz(N * C));
  std::vector<uint16_t> ge16(ge.size());
  be.gelu_forward(tensor(ge, {N * C}), tensor(xm, {N * C}));
  be.gelu_forward(bf16(ge16, {N * C}), tensor(xm, {N * C}));
  check_bitwise(floats_of(ge16), rounded(ge), "gelu out");

  auto qkv = random_floats(sz(N * 3 * C), 14);
  std::vector<float> att(sz(B * NH * T * T)), out(sz(N * C));
  std::vector<uint16_t> out16(out.size());
  be.attention_forward(tensor(out, {B, T, C}), tensor(att, {B, NH, T, T}),
                       tensor(qkv, {B, T, 3 * C}), NH);
  be.attention_forward(bf16(out16, {B, T, C}), tensor(att, {B, NH, T, T}),
                       tensor(qkv, {B, T, 3 * C}), NH);
  check_bitwise(floats_of(out16), rounded(out), "attention out");
}

// The logits of bf16 compute: the head's GEMM writes them in bf16, the cross-entropy reads them
// as fp32 and writes dlogits in place, rounded once.
TEST_CASE("bf16_logits_are_rounded_once_and_their_cross_entropy_is_the_fp32_one", "[cpu][bf16]") {
  CpuBackend be;
  const int64_t N = 6, C = 16, V = 37, Vp = 40;
  auto x16 = bf16_bits_of(random_floats(sz(N * C), 1, -2, 2));
  auto w16 = bf16_bits_of(random_floats(sz(Vp * C), 2, -2, 2));
  auto bias = random_floats(sz(Vp), 3);
  std::vector<uint16_t> logits16(sz(N * Vp));
  std::vector<float> logits(logits16.size());
  be.matmul_forward(bf16(logits16, {N, Vp}), bf16(x16, {N, C}), bf16(w16, {Vp, C}),
                    tensor(bias, {Vp}));
  be.matmul_forward(tensor(logits, {N, Vp}), bf16(x16, {N, C}), bf16(w16, {Vp, C}),
                    tensor(bias, {Vp}));
  check_bitwise(floats_of(logits16), rounded(logits), "bf16 logits: the fp32 sums rounded");

  std::vector<int32_t> targets{3, -1, 36, 0, 17, 5};  // one ignored row
  auto wide = floats_of(logits16);
  std::vector<float> losses(sz(N)), losses_ref(sz(N));
  be.softmax_cross_entropy(bf16(logits16, {N, Vp}), tensor(losses, {N}), tensor(targets, {N}), 0.0f,
                           V);  // evaluation: the logits stay
  check_bitwise(floats_of(logits16), wide, "evaluation leaves the logits");
  be.softmax_cross_entropy(bf16(logits16, {N, Vp}), tensor(losses, {N}), tensor(targets, {N}),
                           0.25f, V);
  be.softmax_cross_entropy(tensor(wide, {N, Vp}), tensor(losses_ref, {N}), tensor(targets, {N}),
                           0.25f, V);
  check_bitwise(losses, losses_ref, "losses: the fp32 cross-entropy of the bf16 values");
  check_bitwise(floats_of(logits16), rounded(wide), "dlogits: the fp32 ones rounded once");
}

// A bf16 qkv (bf16 compute) is read as the fp32 values it widens to: the same out, att and
// dqkv as an fp32 qkv holding them; with an fp32 out it is refused. With it, dqkv may be bf16.
TEST_CASE("bf16_qkv_attention_equals_fp32_attention_on_its_values", "[cpu][bf16]") {
  CpuBackend be;
  const int64_t B = 2, T = 7, C = 12, NH = 3;
  auto qkv16 = bf16_bits_of(random_floats(sz(B * T * 3 * C), 21, -2, 2));
  auto wide = floats_of(qkv16), dy = random_floats(sz(B * T * C), 22);
  std::vector<uint16_t> out16(sz(B * T * C)), out_ref(out16.size());
  std::vector<float> att(sz(B * NH * T * T)), att_ref(att.size());
  std::vector<float> dq(wide.size()), dq_ref(wide.size());
  be.attention_forward(bf16(out16, {B, T, C}), tensor(att, {B, NH, T, T}),
                       bf16(qkv16, {B, T, 3 * C}), NH);
  be.attention_forward(bf16(out_ref, {B, T, C}), tensor(att_ref, {B, NH, T, T}),
                       tensor(wide, {B, T, 3 * C}), NH);
  be.attention_backward(tensor(dq, {B, T, 3 * C}), tensor(dy, {B, T, C}),
                        bf16(qkv16, {B, T, 3 * C}), bf16(out16, {B, T, C}),
                        tensor(att, {B, NH, T, T}), NH);
  be.attention_backward(tensor(dq_ref, {B, T, 3 * C}), tensor(dy, {B, T, C}),
                        tensor(wide, {B, T, 3 * C}), bf16(out_ref, {B, T, C}),
                        tensor(att_ref, {B, NH, T, T}), NH);
  check_bitwise(floats_of(out16), floats_of(out_ref), "out");
  check_bitwise(att, att_ref, "att");
  check_bitwise(dq, dq_ref, "dqkv");
  std::vector<float> out32(out16.size());
  CHECK_THROWS_WITH(be.attention_forward(tensor(out32, {B, T, C}), tensor(att, {B, NH, T, T}),
                                         bf16(qkv16, {B, T, 3 * C}), NH),
                    Catch::Contains("attention_forward: qkv must be f32, or bf16 with a bf16 out"));

  // A bf16 dqkv (bf16 compute's): the fp32 dqkv rounded once, every element overwritten.
  std::vector<uint16_t> dq16(wide.size(), 0x7fc0);  // NaN
  be.attention_backward(bf16(dq16, {B, T, 3 * C}), tensor(dy, {B, T, C}),
                        bf16(qkv16, {B, T, 3 * C}), bf16(out16, {B, T, C}),
                        tensor(att, {B, NH, T, T}), NH);
  check_bitwise(floats_of(dq16), rounded(dq), "bf16 dqkv: the fp32 one rounded once");
  CHECK_THROWS_WITH(be.attention_backward(bf16(dq16, {B, T, 3 * C}), tensor(dy, {B, T, C}),
                                          tensor(wide, {B, T, 3 * C}), bf16(out_ref, {B, T, C}),
                                          tensor(att_ref, {B, NH, T, T}), NH),
                    Catch::Contains("attention_backward: dqkv must be f32, or bf16 with a bf16 "
                                    "qkv; got dqkv bf16 and qkv f32"));
}

TEST_CASE("adamw_step_writes_the_bf16_copy_of_the_updated_params", "[cpu][bf16][optim]") {
  CpuBackend be;
  const int64_t n = 257;
  auto p = random_floats(sz(n), 1), g = random_floats(sz(n), 2);
  auto m = random_floats(sz(n), 3, -0.1f, 0.1f), v = random_floats(sz(n), 4, 0, 0.01f);
  auto p2 = p, m2 = m, v2 = v;
  AdamWParams hp;
  hp.lr = 1e-2f, hp.weight_decay = 0.1f, hp.step = 5;
  std::vector<uint16_t> copy(sz(n), 0x7fc0);
  be.adamw_step(tensor(p, {n}), tensor(g, {n}), tensor(m, {n}), tensor(v, {n}), hp,
                bf16(copy, {n}));
  be.adamw_step(tensor(p2, {n}), tensor(g, {n}), tensor(m2, {n}), tensor(v2, {n}), hp);
  check_bitwise(p, p2, "params with and without the copy");
  check_bitwise(floats_of(copy), rounded(p2), "the copy is the new params rounded");
  std::vector<float> wrong(sz(n));
  CHECK_THROWS_WITH(be.adamw_step(tensor(p, {n}), tensor(g, {n}), tensor(m, {n}), tensor(v, {n}),
                                  hp, tensor(wrong, {n})),
                    Catch::Contains("params_bf16 must be bf16"));
}

TEST_CASE("layernorm_backward_writes_the_bf16_rounding_of_its_new_dinp", "[cpu][bf16]") {
  CpuBackend be;
  const int64_t N = 9, C = 24;
  auto x = random_floats(sz(N * C), 1, -2, 3), w = random_floats(sz(C), 2);
  auto dy = random_floats(sz(N * C), 3), mean = random_floats(sz(N), 4);
  auto rstd = random_floats(sz(N), 5, 0.5f, 2), dx = random_floats(sz(N * C), 6);
  auto dx2 = dx;
  std::vector<uint16_t> dx16(sz(N * C), 0x7fc0);
  be.layernorm_backward(tensor(dx, {N, C}), Tensor(), Tensor(), tensor(dy, {N, C}),
                        tensor(x, {N, C}), tensor(w, {C}), tensor(mean, {N}), tensor(rstd, {N}),
                        bf16(dx16, {N, C}));
  be.layernorm_backward(tensor(dx2, {N, C}), Tensor(), Tensor(), tensor(dy, {N, C}),
                        tensor(x, {N, C}), tensor(w, {C}), tensor(mean, {N}), tensor(rstd, {N}));
  check_bitwise(dx, dx2, "dinp with and without the bf16 copy");
  check_bitwise(floats_of(dx16), rounded(dx), "the copy is the new dinp rounded");
  std::vector<float> wrong(sz(N * C));
  auto call = [&](Tensor dinp, Tensor copy) {
    be.layernorm_backward(dinp, Tensor(), Tensor(), tensor(dy, {N, C}), tensor(x, {N, C}),
                          tensor(w, {C}), tensor(mean, {N}), tensor(rstd, {N}), copy);
  };
  CHECK_THROWS_WITH(call(tensor(dx, {N, C}), tensor(wrong, {N, C})),
                    Catch::Contains("dinp_bf16 must be bf16, got f32"));
  CHECK_THROWS_WITH(call(Tensor(), bf16(dx16, {N, C})), Catch::Contains("dinp_bf16 needs dinp"));
  CHECK_THROWS_WITH(call(tensor(dx, {N, C}), bf16(dx16, {N, C - 1})), Catch::Contains("dinp_bf16"));
}

TEST_CASE("mixed_matmul_operand_dtypes_are_refused_naming_both", "[cpu][bf16][checks]") {
  CpuBackend be;
  std::vector<float> x(12), out(9);
  std::vector<uint16_t> w16(12);
  CHECK_THROWS_WITH(
      be.matmul_forward(tensor(out, {3, 3}), tensor(x, {3, 4}), bf16(w16, {3, 4}), Tensor()),
      Catch::Contains("matmul_forward") && Catch::Contains("f32 and bf16"));
  std::vector<uint16_t> out16(9);
  CHECK_THROWS_WITH(
      be.matmul_forward(bf16(out16, {3, 3}), tensor(x, {3, 4}), tensor(x, {3, 4}), Tensor()),
      Catch::Contains("matmul_forward: out must be f32 with f32 operands, got bf16"));
  std::vector<int32_t> tok(12);
  CHECK_THROWS_WITH(be.gelu_forward(tensor(tok, {12}), tensor(x, {12})),
                    Catch::Contains("gelu_forward") && Catch::Contains("f32 or bf16"));
}

}  // namespace
}  // namespace trainer::cpu::test

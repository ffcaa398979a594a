// The fused GELU ops of backend.h (matmul_gelu_forward, matmul_gelu_backward) on the cpu backend:
// the MLP's gradients against float64 central differences; in fp32 and bf16, bit for bit the
// ops they fuse (the GEMM's fp32 sums, the GELU or its derivative on them, one rounding per
// output); dpre overwritten, not accumulated; a bf16 dout in matmul_backward read as it is; and
// the dtype errors. The cuda backend's epilogues are held to these ops (tests/unit/cuda).
#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "tests/unit/cpu/bf16_test_util.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::cpu::test {
namespace {

// Equal values (bit for bit, except that a product with an underflowed gelu' may be -0 where
// the accumulating reference adds it to +0).
void check_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  size_t first = 0;
  while (first < got.size() && got[first] == want[first]) ++first;
  INFO(what << ": first difference at " << first << " of " << got.size()
            << (first < got.size()
                    ? ": " + std::to_string(got[first]) + " vs " + std::to_string(want[first])
                    : std::string()));
  CHECK(first == got.size());
}

// loss = sum(R * (gelu(x Wfc^T + bfc) Wproj^T + bproj)): the MLP through both fused ops.
TEST_CASE("fused_gelu_mlp_backward_matches_float64_finite_differences", "[cpu][grad]") {
  const int64_t N = 5, C = 4, F = 6;
  auto x = random_floats(sz(N * C), 1, -2, 2), wfc = random_floats(sz(F * C), 2);
  auto bfc = random_floats(sz(F), 3), wproj = random_floats(sz(C * F), 4);
  auto bproj = random_floats(sz(C), 5), r = random_floats(sz(N * C), 6);
  auto x64 = to_double(x), wfc64 = to_double(wfc), bfc64 = to_double(bfc);
  auto wproj64 = to_double(wproj), bproj64 = to_double(bproj), r64 = to_double(r);
  auto loss = [&] {
    std::vector<double> pre(sz(N * F)), h(pre.size()), y(sz(N * C));
    matmul_forward(pre.data(), x64.data(), wfc64.data(), bfc64.data(), N, C, F);
    gelu_forward(h.data(), pre.data(), N * F);
    matmul_forward(y.data(), h.data(), wproj64.data(), bproj64.data(), N, F, C);
    return dot(y, r64);
  };
  const auto ref_x = fd_gradient(x64, loss), ref_wfc = fd_gradient(wfc64, loss);
  const auto ref_bfc = fd_gradient(bfc64, loss), ref_wproj = fd_gradient(wproj64, loss);
  const auto ref_bproj = fd_gradient(bproj64, loss);

  CpuBackend be;
  std::vector<float> pre(sz(N * F)), h(pre.size());
  be.matmul_gelu_forward(tensor(h, {N, F}), tensor(pre, {N, F}), tensor(x, {N, C}),
                         tensor(wfc, {F, C}), tensor(bfc, {F}));
  std::vector<float> dpre(pre.size(), std::nanf(""));  // overwritten, so NaN must not survive
  OverwrittenGrad dx(x.size());
  GradBuf dwfc(wfc.size(), 11), dbfc(bfc.size(), 12);
  GradBuf dwproj(wproj.size(), 13), dbproj(bproj.size(), 14);
  be.matmul_gelu_backward(tensor(dpre, {N, F}), dwproj.t({C, F}), dbproj.t({C}), tensor(r, {N, C}),
                          tensor(h, {N, F}), tensor(wproj, {C, F}), tensor(pre, {N, F}));
  be.matmul_backward(dx.t({N, C}), dwfc.t({F, C}), dbfc.t({F}), tensor(dpre, {N, F}),
                     tensor(x, {N, C}), tensor(wfc, {F, C}));
  check_gradient("dinp", dx.values(), ref_x);
  check_gradient("fc dweight", dwfc.added(), ref_wfc);
  check_gradient("fc dbias", dbfc.added(), ref_bfc);
  check_gradient("proj dweight (accumulated)", dwproj.added(), ref_wproj);
  check_gradient("proj dbias (accumulated)", dbproj.added(), ref_bproj);
}

TEST_CASE("fused_gelu_ops_equal_their_parts_bit_for_bit_in_fp32_and_bf16", "[cpu][bf16]") {
  CpuBackend be;
  const int64_t N = 9, C = 12, F = 20;
  auto x = random_floats(sz(N * C), 1, -2, 2), w = random_floats(sz(F * C), 2);
  auto b = random_floats(sz(F), 3), wp = random_floats(sz(C * F), 4);
  auto dy = random_floats(sz(N * C), 5);

  SECTION("fp32: the GEMM, then the GELU of its output") {
    std::vector<float> pre(sz(N * F)), h(pre.size()), pre_ref(pre.size()), h_ref(pre.size());
    be.matmul_gelu_forward(tensor(h, {N, F}), tensor(pre, {N, F}), tensor(x, {N, C}),
                           tensor(w, {F, C}), tensor(b, {F}));
    be.matmul_forward(tensor(pre_ref, {N, F}), tensor(x, {N, C}), tensor(w, {F, C}),
                      tensor(b, {F}));
    be.gelu_forward(tensor(h_ref, {N * F}), tensor(pre_ref, {N * F}));
    check_equal(pre, pre_ref, "pre");
    check_equal(h, h_ref, "out");

    std::vector<float> dpre(pre.size(), 7.0f), g(pre.size()), dpre_ref(pre.size());
    GradBuf dw(wp.size(), 6), db(sz(C), 7);
    GradBuf dw_ref = dw, db_ref = db;
    be.matmul_gelu_backward(tensor(dpre, {N, F}), dw.t({C, F}), db.t({C}), tensor(dy, {N, C}),
                            tensor(h, {N, F}), tensor(wp, {C, F}), tensor(pre, {N, F}));
    be.matmul_backward(tensor(g, {N, F}), dw_ref.t({C, F}), db_ref.t({C}), tensor(dy, {N, C}),
                       tensor(h, {N, F}), tensor(wp, {C, F}));
    be.gelu_backward(tensor(dpre_ref, {N * F}), tensor(pre, {N * F}), tensor(g, {N * F}));
    check_equal(dpre, dpre_ref, "dpre (overwritten: the 7s are gone)");
    check_equal(dw.g, dw_ref.g, "dweight");
    check_equal(db.g, db_ref.g, "dbias");
  }

  SECTION("bf16: the same fp32 sums, each output rounded once") {
    auto x16 = bf16_bits_of(x), w16 = bf16_bits_of(w), wp16 = bf16_bits_of(wp);
    std::vector<uint16_t> pre16(sz(N * F)), h16(pre16.size());
    be.matmul_gelu_forward(bf16(h16, {N, F}), bf16(pre16, {N, F}), bf16(x16, {N, C}),
                           bf16(w16, {F, C}), tensor(b, {F}));
    std::vector<float> sum(pre16.size());
    std::vector<uint16_t> pre_ref(pre16.size()), h_ref(pre16.size());
    be.matmul_forward(tensor(sum, {N, F}), bf16(x16, {N, C}), bf16(w16, {F, C}), tensor(b, {F}));
    be.round_to_bf16(bf16(pre_ref, {N * F}), tensor(sum, {N * F}));
    be.gelu_forward(bf16(h_ref, {N * F}), tensor(sum, {N * F}));  // from the fp32 sum
    check_equal(floats_of(pre16), floats_of(pre_ref), "pre");
    check_equal(floats_of(h16), floats_of(h_ref), "out");

    std::vector<uint16_t> dpre16(pre16.size(), 0x7fc0);
    GradBuf dw(wp.size(), 6), db(sz(C), 7);
    GradBuf dw_ref = dw, db_ref = db;
    be.matmul_gelu_backward(bf16(dpre16, {N, F}), dw.t({C, F}), db.t({C}), tensor(dy, {N, C}),
                            bf16(h16, {N, F}), bf16(wp16, {C, F}), bf16(pre16, {N, F}));
    std::vector<float> g(pre16.size()), dpre(pre16.size());
    be.matmul_backward(tensor(g, {N, F}), dw_ref.t({C, F}), db_ref.t({C}), tensor(dy, {N, C}),
                       bf16(h16, {N, F}), bf16(wp16, {C, F}));
    auto pre_wide = floats_of(pre16);
    be.gelu_backward(tensor(dpre, {N * F}), tensor(pre_wide, {N * F}), tensor(g, {N * F}));
    std::vector<uint16_t> dpre_ref(pre16.size());
    be.round_to_bf16(bf16(dpre_ref, {N * F}), tensor(dpre, {N * F}));
    check_equal(floats_of(dpre16), floats_of(dpre_ref), "dpre (gelu' of the bf16 pre, rounded)");
    check_equal(dw.g, dw_ref.g, "dweight");
    check_equal(db.g, db_ref.g, "dbias");

    // The next layer's backward takes that bf16 dpre as it is: the same as its fp32 values.
    auto dpre_wide = floats_of(dpre16);
    OverwrittenGrad dx(x.size()), dx_ref(x.size());
    GradBuf dwfc(w.size(), 9), dbfc(b.size(), 10);
    GradBuf dwfc_ref = dwfc, dbfc_ref = dbfc;
    be.matmul_backward(dx.t({N, C}), dwfc.t({F, C}), dbfc.t({F}), bf16(dpre16, {N, F}),
                       bf16(x16, {N, C}), bf16(w16, {F, C}));
    be.matmul_backward(dx_ref.t({N, C}), dwfc_ref.t({F, C}), dbfc_ref.t({F}),
                       tensor(dpre_wide, {N, F}), bf16(x16, {N, C}), bf16(w16, {F, C}));
    check_equal(dx.g, dx_ref.g, "bf16 dout: dinp");
    check_equal(dwfc.g, dwfc_ref.g, "bf16 dout: dweight");
    check_equal(dbfc.g, dbfc_ref.g, "bf16 dout: dbias");
  }
}

TEST_CASE("fused_gelu_ops_refuse_activations_of_another_dtype", "[cpu][bf16][checks]") {
  CpuBackend be;
  std::vector<float> x(12), w(12), y(9), pre(9);
  std::vector<uint16_t> x16(12), w16(12), y16(9), pre16(9);
  CHECK_THROWS_WITH(be.matmul_gelu_forward(bf16(y16, {3, 3}), tensor(pre, {3, 3}),
                                           bf16(x16, {3, 4}), bf16(w16, {3, 4}), Tensor()),
                    Catch::Contains("matmul_gelu_forward: pre must be bf16 like the operands"));
  std::vector<float> wrong(12);
  CHECK_THROWS_WITH(
      be.matmul_gelu_forward(tensor(y, {3, 3}), tensor(wrong, {3, 4}), tensor(x, {3, 4}),
                             tensor(w, {3, 4}), Tensor()),
      Catch::Contains("matmul_gelu_forward: pre") && Catch::Contains("should have 9 elements"));
  CHECK_THROWS_WITH(be.matmul_gelu_backward(Tensor(), Tensor(), Tensor(), tensor(y, {3, 3}),
                                            tensor(x, {3, 4}), tensor(w, {3, 4}), Tensor()),
                    Catch::Contains("matmul_gelu_backward: dpre is required"));
  // a bf16 dout needs bf16 operands
  CHECK_THROWS_WITH(be.matmul_backward(tensor(x, {3, 4}), Tensor(), Tensor(), bf16(y16, {3, 3}),
                                       tensor(x, {3, 4}), tensor(w, {3, 4})),
                    Catch::Contains("matmul_backward: dout must be f32 with f32 operands"));
}

}  // namespace
}  // namespace trainer::cpu::test

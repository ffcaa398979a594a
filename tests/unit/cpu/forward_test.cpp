// Forward ops of the fp32 CpuBackend against naive float64 loops written independently here.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numbers>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::cpu::test {
namespace {

// Element (r, c) of op(X) for a row-major X with leading dimension ld.
double op_at(const float* x, bool trans, int64_t ld, int64_t r, int64_t c) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

TEST_CASE("gemm_matches_triple_loop_for_all_transposes_and_batches", "[cpu][forward]") {
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const int64_t M = 5, N = 4, K = 3, batch = 3, pad = 2;
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const int64_t a_rows = ta ? K : M, b_rows = tb ? N : K;
  const int64_t sa = a_rows * lda, sb = b_rows * ldb, sc = M * ldc;
  auto a = random_floats(sz(batch * sa), 1), b = random_floats(sz(batch * sb), 2);
  auto c = random_floats(sz(batch * sc), 3);
  const float alpha = 0.7f, beta = -1.3f;

  std::vector<double> expect(c.begin(), c.end());
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += op_at(&a[sz(p * sa)], ta, lda, i, k) * op_at(&b[sz(p * sb)], tb, ldb, k, j);
        double& e = expect[sz(p * sc + i * ldc + j)];
        e = alpha * s + beta * e;
      }

  Backend::Gemm g;
  g.trans_a = ta, g.trans_b = tb, g.m = M, g.n = N, g.k = K, g.alpha = alpha, g.beta = beta;
  g.a = a.data(), g.b = b.data(), g.c = c.data(), g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.batch = batch, g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
  CpuBackend().gemm(g);
  INFO("trans_a " << ta << " trans_b " << tb);
  check_close("gemm C (padding included)", c, expect, 1e-5, 1e-6);
}

TEST_CASE("gemm_in_double_matches_triple_loop", "[cpu][forward]") {
  const int64_t M = 3, N = 2, K = 4;
  auto a = to_double(random_floats(sz(M * K), 4)), b = to_double(random_floats(sz(N * K), 5));
  std::vector<double> c(sz(M * N)), expect(sz(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) expect[sz(i * N + j)] += a[sz(i * K + k)] * b[sz(j * K + k)];
  GemmArgs<double> g;
  g.trans_b = true, g.m = M, g.n = N, g.k = K, g.a = a.data(), g.b = b.data(), g.c = c.data();
  gemm(g);
  check_close("dgemm C", c, expect, 1e-14, 1e-15);
}

TEST_CASE("matmul_forward_matches_naive_loop_with_and_without_bias_and_residual",
          "[cpu][forward]") {
  const bool with_bias = GENERATE(true, false);
  // the residual: none, its own buffer, or out itself (the add done in place)
  const int residual = GENERATE(0, 1, 2);
  const int64_t N = 7, C = 5, OC = 3;
  auto x = random_floats(sz(N * C), 6), w = random_floats(sz(OC * C), 7);
  auto b = random_floats(sz(OC), 8), r = random_floats(sz(N * OC), 9);
  std::vector<double> expect(sz(N * OC));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      double s = (with_bias ? b[sz(o)] : 0.0) + (residual ? r[sz(i * OC + o)] : 0.0);
      for (int64_t c = 0; c < C; ++c) s += double(x[sz(i * C + c)]) * w[sz(o * C + c)];
      expect[sz(i * OC + o)] = s;
    }
  // garbage must be overwritten, unless out is the residual
  std::vector<float> out = residual == 2 ? r : std::vector<float>(sz(N * OC), 99.0f);
  const Tensor res = residual == 0 ? Tensor() : tensor(residual == 1 ? r : out, {N, OC});
  CpuBackend().matmul_forward(tensor(out, {N, OC}), tensor(x, {N, C}), tensor(w, {OC, C}),
                              with_bias ? tensor(b, {OC}) : Tensor(), res);
  INFO("with_bias = " << with_bias << ", residual " << residual);
  check_close("matmul out", out, expect, 1e-5, 1e-6);
}

TEST_CASE("matmul_forward_refuses_a_residual_of_the_wrong_size_or_with_a_bf16_out",
          "[cpu][forward][checks]") {
  CpuBackend be;
  const int64_t N = 4, C = 8, OC = 8;
  std::vector<float> x(sz(N * C), 1.0f), w(sz(OC * C), 1.0f), out(sz(N * OC)), r(sz(N * OC));
  CHECK_THROWS_WITH(be.matmul_forward(tensor(out, {N, OC}), tensor(x, {N, C}), tensor(w, {OC, C}),
                                      Tensor(), tensor(r, {N - 1, OC})),
                    Catch::Contains("matmul_forward: residual [3, 8] should have 32 elements"));
  std::vector<uint16_t> x16(x.size()), w16(w.size()), out16(out.size());
  CHECK_THROWS_WITH(
      be.matmul_forward(Tensor(out16.data(), {N, OC}, DType::bf16),
                        Tensor(x16.data(), {N, C}, DType::bf16),
                        Tensor(w16.data(), {OC, C}, DType::bf16), Tensor(), tensor(r, {N, OC})),
      Catch::Contains("matmul_forward: residual must be f32 with an f32 out, got residual f32 and "
                      "out bf16"));
}

TEST_CASE("layernorm_forward_matches_naive_mean_and_biased_variance", "[cpu][forward]") {
  const int64_t N = 3, C = 10;
  auto x = random_floats(sz(N * C), 9, -3, 5), w = random_floats(sz(C), 10);
  auto b = random_floats(sz(C), 11);
  std::vector<double> expect(sz(N * C)), expect_mean(sz(N)), expect_rstd(sz(N));
  for (int64_t i = 0; i < N; ++i) {
    double s = 0, s2 = 0;
    for (int64_t c = 0; c < C; ++c) s += x[sz(i * C + c)];
    const double mean = s / double(C);
    for (int64_t c = 0; c < C; ++c) s2 += std::pow(x[sz(i * C + c)] - mean, 2);
    const double rstd = 1 / std::sqrt(s2 / double(C) + 1e-5);
    for (int64_t c = 0; c < C; ++c)
      expect[sz(i * C + c)] = (x[sz(i * C + c)] - mean) * rstd * w[sz(c)] + b[sz(c)];
    expect_mean[sz(i)] = mean, expect_rstd[sz(i)] = rstd;
  }
  std::vector<float> out(sz(N * C)), mean(sz(N)), rstd(sz(N));
  CpuBackend().layernorm_forward(tensor(out, {N, C}), tensor(mean, {N}), tensor(rstd, {N}),
                                 tensor(x, {N, C}), tensor(w, {C}), tensor(b, {C}));
  check_close("layernorm out", out, expect, 1e-5, 1e-6);
  check_close("layernorm mean", mean, expect_mean, 1e-6, 1e-6);
  check_close("layernorm rstd", rstd, expect_rstd, 1e-5, 1e-6);
}

TEST_CASE("gelu_forward_is_the_tanh_approximation_of_exact_gelu", "[cpu][forward]") {
  const int64_t n = 64;
  auto x = random_floats(sz(n), 12, -6, 6);
  std::vector<double> tanh_form(sz(n)), exact(sz(n));
  const double k = std::sqrt(2 / std::numbers::pi);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    tanh_form[i] = 0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v)));
    exact[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  }
  std::vector<float> out(sz(n));
  CpuBackend().gelu_forward(tensor(out, {n}), tensor(x, {n}));
  check_close("gelu vs the tanh form in float64", out, tanh_form, 1e-5, 1e-6);
  check_close("gelu vs exact erf gelu", out, exact, 0, 1e-3);
}

// For x in [-9, -3], 1 + tanh(u) cancels: in float it keeps few or no correct digits (0 below
// x = -5.5). The backend's x * sigmoid(2u) form keeps its relative precision there, for gelu and
// gelu'; the bound is set by exp's amplification of the argument's rounding (|2u| up to 67).
TEST_CASE("gelu_and_its_derivative_keep_their_relative_precision_for_negative_inputs",
          "[cpu][forward][grad]") {
  const int64_t n = 64;
  auto x = random_floats(sz(n), 13, -9, -3);
  std::vector<double> want(sz(n)), want_derivative(sz(n));
  const double k = std::sqrt(2 / std::numbers::pi), c = 0.044715;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], sig = 1 / (1 + std::exp(-2 * k * (v + c * v * v * v)));
    want[i] = v * sig;
    want_derivative[i] = sig + v * sig * (1 - sig) * 2 * k * (1 + 3 * c * v * v);
  }
  std::vector<float> out(sz(n)), dinp(sz(n), 0.0f), ones(sz(n), 1.0f);
  CpuBackend be;
  be.gelu_forward(tensor(out, {n}), tensor(x, {n}));
  be.gelu_backward(tensor(dinp, {n}), tensor(x, {n}), tensor(ones, {n}));
  check_close("gelu, relative", out, want, 1e-4, 0);
  check_close("gelu', relative", dinp, want_derivative, 1e-4, 0);

  // Far out, where exp(-2u) is inf or 0 and x^3 overflows: gelu -> 0 or x, gelu' -> 0 or 1.
  std::vector<float> far = {-1e18f, -1e13f, -20.0f, 20.0f, 1e13f, 1e18f}, far_out(far.size()),
                     far_d(far.size(), 0.0f), far_ones(far.size(), 1.0f);
  const int64_t m = static_cast<int64_t>(far.size());
  be.gelu_forward(tensor(far_out, {m}), tensor(far, {m}));
  be.gelu_backward(tensor(far_d, {m}), tensor(far, {m}), tensor(far_ones, {m}));
  for (size_t i = 0; i < far.size(); ++i) {
    INFO("x = " << far[i] << ": gelu " << far_out[i] << ", gelu' " << far_d[i]);
    CHECK(far_out[i] == (far[i] < 0 ? 0.0f : far[i]));
    CHECK(far_d[i] == (far[i] < 0 ? 0.0f : 1.0f));
  }
}

TEST_CASE("attention_forward_matches_masked_softmax_reference", "[cpu][forward]") {
  // T 130: three of the GEMM path's 64-row blocks, the last one short
  const int64_t T = GENERATE(int64_t{5}, int64_t{130});
  const int64_t B = 2, NH = 2, HS = 3, C = NH * HS;
  auto qkv = random_floats(sz(B * T * 3 * C), 13, -2, 2);
  std::vector<double> expect_out(sz(B * T * C)), expect_att(sz(B * NH * T * T));
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return double(qkv[sz((b * T + t) * 3 * C + part * C + h * HS + i)]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> score(sz(T));
        double z = 0;
        for (int64_t s = 0; s < T; ++s) {
          double d = 0;
          for (int64_t i = 0; i < HS; ++i) d += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          score[sz(s)] = s > t ? 0.0 : std::exp(d / std::sqrt(double(HS)));
          z += score[sz(s)];
        }
        for (int64_t s = 0; s < T; ++s) {
          const double p = score[sz(s)] / z;
          expect_att[sz(((b * NH + h) * T + t) * T + s)] = p;
          for (int64_t i = 0; i < HS; ++i)
            expect_out[sz((b * T + t) * C + h * HS + i)] += p * at(b, s, 2, h, i);
        }
      }
  std::vector<float> out(sz(B * T * C)), att(sz(B * NH * T * T), 5.0f);
  CpuBackend().attention_forward(tensor(out, {B, T, C}), tensor(att, {B, NH, T, T}),
                                 tensor(qkv, {B, T, 3 * C}), int(NH));
  check_close("attention out", out, expect_out, 1e-5, 1e-6);
  check_close("attention probabilities", att, expect_att, 1e-5, 1e-7);
}

TEST_CASE("embedding_forward_adds_token_and_position_rows", "[cpu][forward]") {
  const int64_t B = 2, T = 3, C = 4, V = 6, maxT = 8, pos_offset = 3;
  std::vector<int32_t> tokens = {5, 0, 2, 2, 5, 1};
  auto wte = random_floats(sz(V * C), 14), wpe = random_floats(sz(maxT * C), 15);
  const bool with_positions = GENERATE(true, false);
  std::vector<double> expect(sz(B * T * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        expect[sz((b * T + t) * C + c)] =
            double(wte[sz(tokens[sz(b * T + t)] * C + c)]) +
            (with_positions ? wpe[sz((pos_offset + t) * C + c)] : 0.0);
  std::vector<float> out(sz(B * T * C));
  CpuBackend().embedding_forward(tensor(out, {B, T, C}), tensor(tokens, {B, T}),
                                 tensor(wte, {V, C}),
                                 with_positions ? tensor(wpe, {maxT, C}) : Tensor(), pos_offset);
  INFO("with_positions = " << with_positions);
  check_close("embedding out", out, expect, 0, 1e-6);
}

TEST_CASE("cross_entropy_losses_match_log_sum_exp_reference", "[cpu][forward]") {
  const int64_t N = 4, V = 9;
  std::vector<int32_t> targets = {8, -1, 0, 4};
  auto logits = random_floats(sz(N * V), 16, -4, 4);
  std::vector<double> expect(sz(N));
  for (int64_t i = 0; i < N; ++i) {
    if (targets[sz(i)] < 0) continue;
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(double(logits[sz(i * V + j)]));
    expect[sz(i)] = std::log(z) - logits[sz(i * V + targets[sz(i)])];
  }
  const std::vector<float> before = logits;
  std::vector<float> losses(sz(N));
  CpuBackend().softmax_cross_entropy(tensor(logits, {N, V}), tensor(losses, {N}),
                                     tensor(targets, {N}), 0.0f, V);
  check_close("losses", losses, expect, 1e-5, 1e-6);
  INFO("dloss_scale 0 must leave the logits untouched");
  CHECK(logits == before);
}

TEST_CASE("cross_entropy_vocab_padding_columns_are_outside_the_softmax", "[cpu][forward]") {
  const int64_t N = 4, V = 9, Vp = 16;
  std::vector<int32_t> targets = {8, -1, 0, 4};
  auto logits = random_floats(sz(N * V), 16, -4, 4);
  std::vector<float> padded(sz(N * Vp));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Vp; ++j)  // large padding values: any leak into the softmax shows
      padded[sz(i * Vp + j)] = j < V ? logits[sz(i * V + j)] : 50.0f + float(j);
  std::vector<float> losses(sz(N)), padded_losses(sz(N));
  CpuBackend be;
  be.softmax_cross_entropy(tensor(logits, {N, V}), tensor(losses, {N}), tensor(targets, {N}), 0.5f,
                           V);
  be.softmax_cross_entropy(tensor(padded, {N, Vp}), tensor(padded_losses, {N}),
                           tensor(targets, {N}), 0.5f, V);
  CHECK(padded_losses == losses);  // the same arithmetic on the same V columns: bit-identical
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Vp; ++j) {
      INFO("row " << i << " column " << j);
      CHECK(padded[sz(i * Vp + j)] == (j < V ? logits[sz(i * V + j)] : 0.0f));
    }
  INFO("a vocab past the row length is refused");
  CHECK_THROWS_WITH(be.softmax_cross_entropy(tensor(padded, {N, Vp}), tensor(padded_losses, {N}),
                                             tensor(targets, {N}), 0.5f, Vp + 1),
                    Catch::Contains("vocab 17 must be in [1, 16]"));
}

}  // namespace
}  // namespace trainer::cpu::test

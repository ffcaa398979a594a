// Context-parallel attention (Backend::attention_forward_cp / attention_backward_cp) against
// whole-sequence attention on one process: each cp rank's out is the full attention's rows of
// its two chunks, and the cp ranks' dqkv_all, summed (the reduce-scatter's sum), are the full
// dqkv's rows of each rank. The float64 whole-sequence reference is the one
// gradients_test.cpp checks against finite differences.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::cpu::test {
namespace {

// Rank r's rows of a [B,T,width] sequence tensor: chunks r and 2cp - 1 - r of 2cp, [B,Tl,width].
template <class Real>
std::vector<Real> rank_rows(const std::vector<Real>& seq, int64_t r, int64_t cp, int64_t B,
                            int64_t T, int64_t width) {
  const int64_t L = T / (2 * cp), Tl = 2 * L;
  std::vector<Real> out(sz(B * Tl * width));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t chunk = half == 0 ? r : 2 * cp - 1 - r;
      std::copy_n(seq.begin() + (b * T + chunk * L) * width, L * width,
                  out.begin() + (b * Tl + half * L) * width);
    }
  return out;
}

TEST_CASE("context_parallel_attention_matches_whole_sequence_attention", "[cpu][cp]") {
  // L 40: a rank's 80 rows cross the GEMM path's 64-row blocks
  const auto [cp, L] =
      GENERATE(std::pair<int64_t, int64_t>{2, 3}, std::pair<int64_t, int64_t>{3, 2},
               std::pair<int64_t, int64_t>{2, 40});
  const int64_t B = 2, NH = 2, HS = 3, C = NH * HS, T = 2 * cp * L, Tl = 2 * L;
  INFO("cp " << cp << ", chunk " << L << " tokens, T " << T);
  const auto qkv = random_floats(sz(B * T * 3 * C), 80, -1.5, 1.5);
  const auto dout = random_floats(sz(B * T * C), 81);
  auto qkv64 = to_double(qkv), dout64 = to_double(dout);
  std::vector<double> out64(sz(B * T * C)), att64(sz(B * NH * T * T)), dqkv64(qkv.size());
  attention_forward(out64.data(), att64.data(), qkv64.data(), B, T, C, NH);
  attention_backward(dqkv64.data(), dout64.data(), qkv64.data(), att64.data(), B, T, C, NH);

  std::vector<float> qkv_all;  // every rank's rows, rank order: the all-gather
  for (int64_t r = 0; r < cp; ++r) {
    const auto rows = rank_rows(qkv, r, cp, B, T, 3 * C);
    qkv_all.insert(qkv_all.end(), rows.begin(), rows.end());
  }
  CpuBackend be;
  std::vector<double> dqkv_sum(qkv_all.size(), 0.0);
  for (int64_t r = 0; r < cp; ++r) {
    INFO("cp rank " << r);
    const ContextSplit split{int(r), int(cp)};
    std::vector<float> out(sz(B * Tl * C), std::nanf("")), att(sz(B * NH * Tl * T), std::nanf(""));
    be.attention_forward_cp(tensor(out, {B, Tl, C}), tensor(att, {B, NH, Tl, T}),
                            tensor(qkv_all, {cp, B, Tl, 3 * C}), split, int(NH));
    check_close("out", out, rank_rows(out64, r, cp, B, T, C), 1e-5, 1e-6);
    auto dout_r = rank_rows(dout, r, cp, B, T, C);
    std::vector<float> dqkv_all(qkv_all.size(), std::nanf(""));  // overwritten
    be.attention_backward_cp(tensor(dqkv_all, {cp, B, Tl, 3 * C}), tensor(dout_r, {B, Tl, C}),
                             tensor(qkv_all, {cp, B, Tl, 3 * C}), tensor(out, {B, Tl, C}),
                             tensor(att, {B, NH, Tl, T}), split, int(NH));
    for (size_t i = 0; i < dqkv_all.size(); ++i) dqkv_sum[i] += dqkv_all[i];
  }
  for (int64_t r = 0; r < cp; ++r) {
    INFO("cp rank " << r << "'s dqkv, summed over the cp ranks");
    const size_t n = sz(B * Tl * 3 * C);
    const std::vector<double> got(dqkv_sum.begin() + static_cast<long>(sz(r) * n),
                                  dqkv_sum.begin() + static_cast<long>(sz(r + 1) * n));
    check_gradient("dqkv", got, rank_rows(dqkv64, r, cp, B, T, 3 * C), 1e-5);
  }
}

TEST_CASE("context_parallel_attention_refuses_a_mismatched_split", "[cpu][cp]") {
  const int64_t B = 1, NH = 1, C = 2, Tl = 4;
  std::vector<float> qkv_all(sz(2 * B * Tl * 3 * C)), out(sz(B * Tl * C)), att(sz(B * NH * Tl * 8));
  CpuBackend be;
  CHECK_THROWS_WITH(be.attention_forward_cp(tensor(out, {B, Tl, C}), tensor(att, {B, NH, Tl, 8}),
                                            tensor(qkv_all, {2, B, Tl, 3 * C}), {0, 3}, int(NH)),
                    Catch::Contains("must be [cp, B, Tl, 3C] with cp = 3"));
}

}  // namespace
}  // namespace trainer::cpu::test

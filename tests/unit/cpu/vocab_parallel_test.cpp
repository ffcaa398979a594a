// Vocabulary parallelism's ops (Megatron's vocab-parallel embedding and cross-entropy): the
// shards' results, combined as the tp ranks combine them, equal the whole vocabulary's. The
// float64 instantiations against softmax_cross_entropy<double> (itself checked against finite
// differences in gradients_test.cpp), then the backend's fp32 ops against the float64 ones.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "tests/unit/cpu/op_test_util.h"

using namespace trainer;
using namespace trainer::cpu;
using namespace trainer::cpu::test;

namespace {

// The whole row's loss and dlogits by vocabulary shards: R shards of Vp / R columns, each one's
// stats, all of them gathered in rank order, then each shard's finish; the shards' dlogits are
// put back side by side. Real: the scalar type of the ops.
struct ShardedLoss {
  std::vector<double> losses;                 // [N], shard 0's (every shard's must be equal)
  std::vector<double> dlogits;                // [N, Vp]
  std::vector<std::vector<double>> per_rank;  // every shard's losses
};

ShardedLoss sharded_loss(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                         int64_t N, int64_t V, int64_t Vp, int64_t R, double scale) {
  const int64_t Vl = Vp / R;
  std::vector<std::vector<double>> shards(sz(R), std::vector<double>(sz(N * Vl)));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < Vl; ++j)
        shards[sz(r)][sz(i * Vl + j)] = logits[sz(i * Vp + r * Vl + j)];
  // shard r's classes: its columns of global index < V
  const auto classes = [&](int64_t r) { return std::clamp<int64_t>(V - r * Vl, 0, Vl); };
  std::vector<double> all_stats(sz(R * N * kCrossEntropyStats));
  for (int64_t r = 0; r < R; ++r)
    cross_entropy_shard_stats(all_stats.data() + r * N * kCrossEntropyStats, shards[sz(r)].data(),
                              targets.data(), N, Vl, classes(r), r * Vl);
  ShardedLoss out;
  out.dlogits.assign(sz(N * Vp), std::nan(""));
  for (int64_t r = 0; r < R; ++r) {
    std::vector<double> losses(sz(N), std::nan(""));
    cross_entropy_shard_finish(shards[sz(r)].data(), losses.data(), all_stats.data(), R,
                               targets.data(), N, Vl, classes(r), r * Vl, scale);
    out.per_rank.push_back(losses);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < Vl; ++j)
        out.dlogits[sz(i * Vp + r * Vl + j)] = shards[sz(r)][sz(i * Vl + j)];
  }
  out.losses = out.per_rank[0];
  return out;
}

}  // namespace

TEST_CASE("vocab_parallel_cross_entropy_equals_the_whole_vocabulary_in_float64",
          "[cpu][vocab_parallel]") {
  const int64_t N = 6;
  struct Shape {
    int64_t V, Vp, R;
  };
  // Shards with padding at the end of the last, a shard that is all padding (V 25 of 40 in 4:
  // shard 3 holds columns 30..39) and one shard (the fused op's own split).
  const Shape shapes[] = {{37, 40, 4}, {25, 40, 4}, {40, 40, 2}, {37, 40, 1}, {64, 64, 8}};
  for (const Shape& s : shapes) {
    INFO("V " << s.V << ", Vp " << s.Vp << ", " << s.R << " shards");
    std::vector<double> logits = to_double(random_floats(sz(N * s.Vp), 5, -6, 6));
    // targets in the first and the last shard, at shard edges, and an ignored row
    std::vector<int32_t> targets = {0,
                                    static_cast<int32_t>(s.V - 1),
                                    -1,
                                    static_cast<int32_t>(s.Vp / s.R - 1),
                                    static_cast<int32_t>(s.Vp / s.R % s.V),
                                    7};
    const double scale = 0.25;
    std::vector<double> want_dlogits = logits, want(sz(N));
    softmax_cross_entropy(want_dlogits.data(), want.data(), targets.data(), N, s.V, scale, s.Vp);
    const ShardedLoss got = sharded_loss(logits, targets, N, s.V, s.Vp, s.R, scale);
    for (int64_t r = 0; r < s.R; ++r) {
      INFO("shard " << r);
      check_close("losses", got.per_rank[sz(r)], want, 1e-13, 1e-13);
    }
    CHECK(got.losses[2] == 0.0);  // the ignored row
    check_close("dlogits", got.dlogits, want_dlogits, 1e-12, 1e-14);

    // loss only (an eval forward, dloss_scale 0): the logits stay as they were
    const ShardedLoss eval = sharded_loss(logits, targets, N, s.V, s.Vp, s.R, 0.0);
    check_close("eval losses", eval.losses, want, 1e-13, 1e-13);
    CHECK(eval.dlogits == logits);
  }
}

TEST_CASE("vocab_parallel_cross_entropy_backend_ops_match_float64_fp32_and_bf16",
          "[cpu][vocab_parallel]") {
  CpuBackend be;
  const int64_t N = 5, V = 50, Vp = 64, R = 4, Vl = Vp / R;
  std::vector<float> logits = random_floats(sz(N * Vp), 9, -5, 5);
  std::vector<int32_t> targets = {3, 49, -1, 16, 31};
  const double scale = 0.5;
  const ShardedLoss want = sharded_loss(to_double(logits), targets, N, V, Vp, R, scale);
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "fp32") << " logits");
    std::vector<std::vector<float>> shards(sz(R), std::vector<float>(sz(N * Vl)));
    std::vector<std::vector<uint16_t>> shards16(sz(R));
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < Vl; ++j)
          shards[sz(r)][sz(i * Vl + j)] = logits[sz(i * Vp + r * Vl + j)];
      shards16[sz(r)].resize(sz(N * Vl));
      be.round_to_bf16(Tensor(shards16[sz(r)].data(), {N, Vl}, DType::bf16),
                       tensor(shards[sz(r)], {N, Vl}));
    }
    const auto logits_of = [&](int64_t r) {
      return bf16 ? Tensor(shards16[sz(r)].data(), {N, Vl}, DType::bf16)
                  : tensor(shards[sz(r)], {N, Vl});
    };
    std::vector<float> all_stats(sz(R * N * 3), std::nanf(""));
    for (int64_t r = 0; r < R; ++r)
      be.cross_entropy_shard_stats(Tensor(all_stats.data() + r * N * 3, {N, 3}, DType::f32),
                                   logits_of(r), tensor(targets, {N}), r * Vl, V);
    std::vector<double> dlogits(sz(N * Vp));
    for (int64_t r = 0; r < R; ++r) {
      std::vector<float> losses(sz(N), std::nanf(""));
      be.cross_entropy_shard_finish(logits_of(r), tensor(losses, {N}), tensor(all_stats, {R, N, 3}),
                                    tensor(targets, {N}), static_cast<float>(scale), r * Vl, V);
      check_close("losses", losses, want.losses, bf16 ? 2e-2 : 1e-6, 1e-6);
      std::vector<float> d(sz(N * Vl));
      if (bf16)
        for (size_t k = 0; k < d.size(); ++k)
          d[k] = std::bit_cast<float>(uint32_t{shards16[sz(r)][k]} << 16);
      else
        d = shards[sz(r)];
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < Vl; ++j) dlogits[sz(i * Vp + r * Vl + j)] = d[sz(i * Vl + j)];
    }
    check_close("dlogits", dlogits, want.dlogits, bf16 ? 2e-2 : 1e-5, bf16 ? 2e-3 : 1e-7);
  }
  // a target past the vocabulary is bad input, named
  std::vector<int32_t> bad = {3, 50, 0, 0, 0};
  std::vector<float> stats(sz(N * 3));
  CHECK_THROWS_WITH(be.cross_entropy_shard_stats(tensor(stats, {N, 3}), tensor(logits, {N, Vp}),
                                                 tensor(bad, {N}), 0, V),
                    Catch::Contains("targets[1] = 50"));
}

// A vocabulary-parallel embedding: each shard looks up the tokens of its rows (the others as -1,
// no row) and the positions enter once; the shards' outputs sum to the whole table's, and their
// dwte are the whole one's rows.
TEST_CASE("vocab_parallel_embedding_shards_sum_to_the_whole_table", "[cpu][vocab_parallel]") {
  CpuBackend be;
  const int64_t B = 2, T = 5, C = 3, V = 12, R = 3, Vl = V / R;
  std::vector<float> wte = random_floats(sz(V * C), 1), wpe = random_floats(sz(T * C), 2);
  std::vector<float> dout = random_floats(sz(B * T * C), 3);
  std::vector<int32_t> tokens = {0, 3, 4, 11, 7, 8, 8, 1, 5, 10};
  std::vector<float> want(sz(B * T * C)), dwte_want(sz(V * C), 0.0f), dwpe_want(sz(T * C), 0.0f);
  be.embedding_forward(tensor(want, {B, T, C}), tensor(tokens, {B, T}), tensor(wte, {V, C}),
                       tensor(wpe, {T, C}), 0);
  be.embedding_backward(tensor(dwte_want, {V, C}), tensor(dwpe_want, {T, C}),
                        tensor(dout, {B, T, C}), tensor(tokens, {B, T}), 0);
  std::vector<double> sum(sz(B * T * C), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<int32_t> local(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
      local[i] = tokens[i] / Vl == r ? static_cast<int32_t>(tokens[i] - r * Vl) : -1;
    std::vector<float> rows(wte.begin() + r * Vl * C, wte.begin() + (r + 1) * Vl * C);
    std::vector<float> out(sz(B * T * C), std::nanf("")), dwte(sz(Vl * C), 0.0f);
    be.embedding_forward(tensor(out, {B, T, C}), tensor(local, {B, T}), tensor(rows, {Vl, C}),
                         r == 0 ? tensor(wpe, {T, C}) : Tensor(), 0);
    for (size_t k = 0; k < out.size(); ++k) sum[k] += out[k];
    be.embedding_backward(tensor(dwte, {Vl, C}), Tensor(), tensor(dout, {B, T, C}),
                          tensor(local, {B, T}), 0);
    const std::vector<float> dwte_rows(dwte_want.begin() + r * Vl * C,
                                       dwte_want.begin() + (r + 1) * Vl * C);
    INFO("shard " << r);
    CHECK(dwte == dwte_rows);  // each row sums the same positions in the same order
  }
  check_close("embedding", sum, want, 1e-6, 1e-7);
}

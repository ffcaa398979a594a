#include <catch2/catch.hpp>

#include "runtime/parallel/zero_memory.h"
#include "runtime/parallel/zero_shard.h"

using trainer::parallel::Range;
using trainer::parallel::ZeroShards;

TEST_CASE("zero shards tile the buffer contiguously in rank order", "[zero]") {
  for (int64_t n : {7, 10, 64, 1001}) {
    for (int dp = 1; dp <= 5; ++dp) {
      if (n < dp) continue;
      const ZeroShards s(n, dp);
      int64_t expect_begin = 0;
      for (int r = 0; r < dp; ++r) {
        const Range sh = s.shard(r);
        INFO("n " << n << " dp " << dp << " rank " << r << ": [" << sh.begin << ", " << sh.end
                  << ") expected begin " << expect_begin);
        CHECK(sh.begin == expect_begin);
        CHECK(sh.size() >= n / dp);
        CHECK(sh.size() < n / dp + dp);  // only the last rank holds the sub-dp remainder
        expect_begin = sh.end;
      }
      CHECK(expect_begin == n);
    }
  }
}

TEST_CASE("zero pieces of a range are the range cut at shard boundaries", "[zero]") {
  const ZeroShards s(103, 4);  // chunks of 25, the last rank 28
  for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, 103}, {10, 60}, {30, 40}, {74, 103}}) {
    int64_t covered = 0, prev_end = lo;
    for (int r = 0; r < 4; ++r) {
      const Range p = s.piece(r, lo, hi);
      INFO("range [" << lo << ", " << hi << ") rank " << r << ": [" << p.begin << ", " << p.end
                     << ")");
      CHECK(p.begin >= lo);
      CHECK(p.end <= hi);
      if (p.size() > 0) {
        CHECK(p.begin == prev_end);
        prev_end = p.end;
      }
      covered += p.size();
    }
    CHECK(covered == hi - lo);
  }
}

TEST_CASE("zero memory formula reproduces the ZeRO paper's 7.5B / 64 GPU example", "[zero]") {
  // Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, Nd = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB,
  // 1.88 GB per device for stages 0..3.
  const double paper_gb[] = {120, 31.4, 16.6, 1.88};
  const trainer::parallel::BytesPerParam mixed = trainer::parallel::kZeroPaperMixedPrecision;
  for (int stage = 0; stage <= 3; ++stage) {
    const double gb =
        trainer::parallel::predict_zero_memory(stage, 7'500'000'000, 64, mixed).total() / 1e9;
    INFO("stage " << stage << ": " << gb << " GB vs paper " << paper_gb[stage]);
    CHECK(gb == Approx(paper_gb[stage]).epsilon(0.01));
  }
}

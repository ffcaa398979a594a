// ZeRO's segments (zero_layout.h): without expert parallelism the whole buffer over dp; under it
// the runs of dense and of expert tensors, alternating, each cut over its own group, so that the
// dp ranks' dense shards and the edp ranks' expert shards each hold every element once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "runtime/parallel/zero_layout.h"

using namespace trainer;

namespace {

model::ParamLayout moe_layout(int ep_rank, int ep) {
  model::GptDims d{11, 5, 3, 8, 2, 4};  // V, T, L, C, NH, F
  d.num_experts = 4;
  model::GptShard shard = model::GptShard::whole(d);
  shard.ep_rank = ep_rank;
  shard.ep_size = ep;
  return model::ParamLayout(d, shard);
}

}  // namespace

TEST_CASE("zero segments: one of the whole buffer without expert parallelism", "[zero]") {
  const model::ParamLayout layout = moe_layout(0, 1);
  const auto segments = parallel::zero_segments(layout, 4, 0);
  REQUIRE(segments.size() == 1);
  CHECK(segments[0].flat.begin == 0);
  CHECK(segments[0].flat.end == layout.total_numel());
  CHECK(segments[0].shards.dp() == 4);
}

TEST_CASE("zero segments under expert parallelism: dense runs over dp, expert runs over edp",
          "[zero][moe]") {
  const int dp = 4, ep = 2, edp = dp / ep;
  const model::ParamLayout layout = moe_layout(1, ep);
  const auto segments = parallel::zero_segments(layout, dp, edp);
  // embedding + block 0's dense part, then per block its experts and the next dense part
  REQUIRE(segments.size() == 2 * 3 + 1);
  int64_t at = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const parallel::ZeroSegment& s = segments[i];
    INFO("segment " << i << " [" << s.flat.begin << ", " << s.flat.end << ")");
    CHECK(s.flat.begin == at);
    CHECK(s.expert == (i % 2 == 1));
    CHECK(s.shards.dp() == (s.expert ? edp : dp));
    for (const model::ParamSpec& p : layout.params())
      if (p.offset >= s.flat.begin && p.offset < s.flat.end) CHECK(p.expert == s.expert);
    // the group's owned ranges tile the segment
    int64_t next = s.flat.begin;
    for (int r = 0; r < s.shards.dp(); ++r) {
      CHECK(s.owned(r).begin == next);
      next = s.owned(r).end;
    }
    CHECK(next == s.flat.end);
    at = s.flat.end;
  }
  CHECK(at == layout.total_numel());
  // ZeRO 1's staging and traffic over these segments: the largest chunk; a reduce-scatter and
  // an all-gather of each segment over its group
  int64_t chunk = 0;
  double bytes = 0;
  for (const parallel::ZeroSegment& s : segments) {
    chunk = std::max(chunk, s.shards.chunk());
    bytes += 2.0 * (s.shards.dp() - 1) * 4 * static_cast<double>(s.shards.chunk());
  }
  CHECK(parallel::zero1_staging_floats(segments) == chunk);
  CHECK(parallel::zero1_traffic_bytes(segments) == bytes);
}

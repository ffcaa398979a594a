#pragma once
// How ZeRO cuts one rank's model (its flat fp32 buffer) into units and shards, and what that costs:
// the staging ZeroOptimizer allocates and the bytes it sends per step. ZeroOptimizer is built from
// these, and `trainer plan` estimates with them, so the two cannot drift apart.
#include <cstdint>
#include <vector>

#include "runtime/model/param_layout.h"
#include "runtime/parallel/zero_shard.h"

namespace trainer::parallel {

// ZeroOptimizer runs for a stage > 0 over more than one replica; one replica has nothing to shard
// and trains as stage 0.
constexpr bool zero_shards_state(int stage, int dp) {
  return stage > 0 && dp > 1;
}

// Stage >= 2: reduce-scatters of finished units kept in flight at once.
inline constexpr int kScattersInFlight = 2;

struct ZeroUnits {
  ZeroUnits(const model::ParamLayout& layout, int dp);
  ZeroShards shards;
  std::vector<Range> unit_range;  // by unit id: 0 embeddings, 1..L blocks, L+1 final norm
  int64_t max_unit_piece = 0;     // the largest piece of any unit on any rank
};

// A piece of the flat buffer that ZeRO shards over one group. Without expert parallelism the
// whole buffer is one segment over dp. Under expert parallelism (ZeRO 1, Megatron's distributed
// optimizer with expert groups) the buffer alternates runs of dense tensors, replicated over dp,
// and of expert tensors (ParamSpec::expert), replicated only over the edp ranks that hold the same
// experts: each run is a segment sharded over its own group, so a rank owns 1/dp of every dense
// run and 1/edp of every expert run.
struct ZeroSegment {
  Range flat;                          // its elements of the flat buffer
  bool expert = false;                 // sharded over edp (else over dp)
  ZeroShards shards;                   // its cut (element 0 = flat.begin) over that group
  Range owned(int group_rank) const {  // in flat elements
    const Range s = shards.shard(group_rank);
    return {flat.begin + s.begin, flat.begin + s.end};
  }
};

// edp 0: no expert parallelism (one segment of the whole buffer over dp).
std::vector<ZeroSegment> zero_segments(const model::ParamLayout& layout, int dp, int edp);

// ZeRO 1 over segments (zero_segments): the fp32 staging of the whole-buffer all-gathers (the
// largest chunk), and the bytes one rank sends per step (a reduce-scatter and an all-gather of
// each segment over its group).
int64_t zero1_staging_floats(const std::vector<ZeroSegment>& segments);
double zero1_traffic_bytes(const std::vector<ZeroSegment>& segments);

// fp32 elements of communication staging ZeroOptimizer holds: stage 1 and 2 one chunk (the
// whole-buffer all-gather); stage >= 2 kScattersInFlight range reduce-scatters of (dp + 1) * k;
// stage 3 two range gathers (the synchronous one and the prefetch) of (dp + 1) * k.
int64_t zero_staging_floats(int stage, const ZeroUnits& u);

// Bytes one rank sends per step over the dp group for `grad_accum` micro-batches (ring
// collectives: a reduce-scatter or all-gather of dp pieces of k sends (dp - 1) * k).
//   stage 0: the buckets' all-reduce of the gradients, once per step: 2 (dp - 1) / dp of them;
//   stage 1: a whole-buffer reduce-scatter and all-gather (chunks);
//   stage 2: every micro-batch a reduce-scatter per unit, each padded to its largest piece;
//            then the whole-buffer all-gather;
//   stage 3: every micro-batch that reduce-scatter, a gather per block in backward, and in
//            forward a gather per unit but the embedding (kept from the step's first forward).
double zero_traffic_bytes(int stage, const ZeroUnits& u, int grad_accum);

}  // namespace trainer::parallel

#pragma once
// How ZeRO cuts one rank's model (its flat fp32 buffer) into units and shards, and what that costs:
// the staging ZeroOptimizer allocates and the bytes it sends per step. ZeroOptimizer is built from
// these, and `trainer plan` estimates with them, so the two cannot drift apart.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/model/param_layout.h"
#include "runtime/model/state_memory.h"
#include "runtime/parallel/zero_shard.h"

namespace trainer::parallel {

// ZeroOptimizer runs for a stage > 0 over more than one replica; one replica has nothing to shard
// and trains as stage 0.
constexpr bool zero_shards_state(int stage, int dp) {
  return stage > 0 && dp > 1;
}

// How the model allocates what ZeRO releases (Gpt's StateMemory), where it runs: ZeRO 2 releases
// gradients, ZeRO 3 params and gradients.
constexpr model::StateMemory zero_state_memory(int stage, int dp) {
  if (!zero_shards_state(stage, dp) || stage < 2) return model::StateMemory::whole;
  return stage == 2 ? model::StateMemory::grads_released : model::StateMemory::released;
}

// Stage >= 2: reduce-scatters of finished units kept in flight at once.
inline constexpr int kScattersInFlight = 2;

// A piece of the flat buffer that ZeRO shards over one group. Without expert parallelism the
// whole buffer is one segment over dp. Under expert parallelism (ZeRO 1 and 2; ZeRO 1 is
// Megatron's distributed optimizer with expert groups) the buffer alternates runs of dense
// tensors, replicated over dp, and of expert tensors (ParamSpec::expert), replicated only over the
// edp ranks that hold the same experts: each run is a segment sharded over its own group, so a rank
// owns 1/dp of every dense run and 1/edp of every expert run.
struct ZeroSegment {
  Range flat;                          // its elements of the flat buffer
  bool expert = false;                 // sharded over edp (else over dp)
  ZeroShards shards;                   // its cut (element 0 = flat.begin) over that group
  Range owned(int group_rank) const {  // in flat elements
    const Range s = shards.shard(group_rank);
    return {flat.begin + s.begin, flat.begin + s.end};
  }
  // Over more than one rank (an expert run at edp 1 is whole on its rank: nothing to reduce,
  // gather or release, and its gradients accumulate in place).
  bool sharded() const { return shards.dp() > 1; }
};

// edp 0: no expert parallelism (one segment of the whole buffer over dp).
std::vector<ZeroSegment> zero_segments(const model::ParamLayout& layout, int dp, int edp);

// The units (the blocks, whose gradients backward finishes one after another) and segments of a
// rank's buffer. edp: under expert parallelism the ranks that hold the same experts (0: none).
struct ZeroUnits {
  ZeroUnits(const model::ParamLayout& layout, int dp, int edp = 0);
  ZeroShards shards;  // the whole buffer over dp (the one segment without expert parallelism)
  std::vector<Range> unit_range;  // by unit id: 0 embeddings, 1..L blocks, L+1 final norm
  std::vector<ZeroSegment> segments;
  int64_t range_op_floats = 0;  // the most staging a unit's reduce-scatter in one segment takes
  int max_parts = 0;            // the most parts of a unit (stage 3 gathers one range per part)
  // f(segment index, range relative to the segment) for the unit's part in each sharded segment
  // it meets, in buffer order.
  template <class F>
  void for_each_part(int unit, F&& f) const {
    const Range& r = unit_range[static_cast<size_t>(unit)];
    for (size_t i = 0; i < segments.size(); ++i) {
      if (!segments[i].sharded()) continue;
      const Range& seg = segments[i].flat;
      const int64_t lo = std::max(r.begin, seg.begin), hi = std::min(r.end, seg.end);
      if (lo < hi) f(i, Range{lo - seg.begin, hi - seg.begin});
    }
  }
  // f(segment index, range relative to the segment) for every unit's parts, in unit order.
  template <class F>
  void for_each_unit_part(F&& f) const {
    for (size_t u = 0; u < unit_range.size(); ++u) for_each_part(static_cast<int>(u), f);
  }
};

// ZeRO 1 over segments (zero_segments): the fp32 staging of the whole-buffer all-gathers (the
// largest chunk), and the bytes one rank sends per step (a reduce-scatter and an all-gather of
// each segment over its group).
int64_t zero1_staging_floats(const std::vector<ZeroSegment>& segments);
double zero1_traffic_bytes(const std::vector<ZeroSegment>& segments);

// fp32 elements of communication staging ZeroOptimizer holds: stage 1 and 2 the largest chunk
// of a segment (the whole-buffer all-gathers); stage >= 2 kScattersInFlight range reduce-scatters
// of a unit's part each (range_op_floats). Stage 3's unit gathers land in place (none).
int64_t zero_staging_floats(int stage, const ZeroUnits& u);

// Bytes one rank sends per step over the dp group for `grad_accum` micro-batches, at most (ring
// collectives: a reduce-scatter or all-gather of dp pieces of k sends (dp - 1) * k; a unit's
// range op, a pipelined reduce to or broadcast from each owner of a piece, at most the range).
//   stage 0: the buckets' all-reduce of the gradients, once per step: 2 (dp - 1) / dp of them
//            (of each segment, over its group);
//   stage 1: a whole-buffer reduce-scatter and all-gather (chunks) per segment;
//   stage 2: every micro-batch a range reduce per unit (per segment it meets); then the
//            whole-buffer all-gathers;
//   stage 3: every micro-batch those reduces, a gather per block in backward, and in forward a
//            gather per unit but the embedding (kept from the step's first forward).
double zero_traffic_bytes(int stage, const ZeroUnits& u, int grad_accum);

// Stage 3: the params elements a rank holds at most, over the ranks and the step (without expert
// parallelism; `u` of one segment). ZeroOptimizer keeps the embedding unit gathered (the tied
// head reads it) and two consecutive others (one lands before the one before it is released, or
// a prefetch starts): `gathered` their elements at most, `held` the most any rank holds of them
// and of its own shard together (the bf16 copy holds only the gathered units). At most the whole.
struct Zero3Params {
  int64_t held = 0, gathered = 0;
};
Zero3Params zero3_peak_params(const ZeroUnits& u);

}  // namespace trainer::parallel

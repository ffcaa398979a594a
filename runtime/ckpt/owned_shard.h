#pragma once
// What a rank owns of the training state, as checkpoints save and load it: runs of flat elements
// of its model's parameter buffer, each with its master weights and Adam moments. One run without
// ZeRO (the whole buffer, on the owning replica) and with ZeRO over one group (the rank's shard);
// under expert parallelism with ZeRO one run per segment (parallel::zero_segments): a shard of
// each dense run over dp and of each expert run over edp.
#include <cstdint>
#include <vector>

namespace trainer::ckpt {

// Flat elements [begin, end) of the parameter buffer; params points at element `begin`, m and v
// at their first element.
struct OwnedShard {
  int64_t begin = 0, end = 0;
  float* params = nullptr;
  float* m = nullptr;
  float* v = nullptr;
};

using OwnedRuns = std::vector<OwnedShard>;  // disjoint, in increasing order

}  // namespace trainer::ckpt

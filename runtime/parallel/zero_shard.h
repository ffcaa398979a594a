#pragma once
// ZeroShards: how ZeRO cuts the model's flat fp32 buffer of n elements over dp ranks. Each rank
// owns ONE contiguous range (the checkpoint contract, OwnedState): rank r owns
// [r*c, (r+1)*c) with c = n / dp, and the last rank also owns the remainder (< dp elements).
// The equal part [0, dp*c) maps onto the Comm's rank-major chunks, so whole-buffer
// reduce-scatter / all-gather run in place without padding; the tail is summed/broadcast apart.
#include <cstdint>

namespace trainer::parallel {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
};

class ZeroShards {
 public:
  ZeroShards(int64_t numel, int dp);

  int dp() const { return dp_; }
  int64_t numel() const { return n_; }
  int64_t chunk() const { return chunk_; }              // equal part per rank
  int64_t tail_begin() const { return chunk_ * dp_; }   // start of the remainder
  Range shard(int rank) const;                          // what `rank` owns
  Range piece(int rank, int64_t lo, int64_t hi) const;  // shard(rank) ∩ [lo, hi)

 private:
  int64_t n_;
  int dp_;
  int64_t chunk_;
};

}  // namespace trainer::parallel

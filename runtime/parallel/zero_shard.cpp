#include "runtime/parallel/zero_shard.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace trainer::parallel {

ZeroShards::ZeroShards(int64_t numel, int dp) : n_(numel), dp_(dp), chunk_(numel / dp) {
  TRAINER_CHECK(dp >= 1 && numel >= dp, "cannot shard " << numel << " elements over " << dp);
}

Range ZeroShards::shard(int rank) const {
  const int64_t begin = chunk_ * rank;
  return {begin, rank == dp_ - 1 ? n_ : begin + chunk_};
}

Range ZeroShards::piece(int rank, int64_t lo, int64_t hi) const {
  const Range s = shard(rank);
  const int64_t b = std::max(s.begin, lo), e = std::min(s.end, hi);
  return e > b ? Range{b, e} : Range{lo, lo};  // empty pieces sit at lo, inside [lo, hi)
}

int64_t ZeroShards::max_piece(int64_t lo, int64_t hi) const {
  int64_t k = 0;
  for (int r = 0; r < dp_; ++r) k = std::max(k, piece(r, lo, hi).size());
  return k;
}

}  // namespace trainer::parallel

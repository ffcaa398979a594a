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

}  // namespace trainer::parallel

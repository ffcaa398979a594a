#pragma once
// One yes/no all ranks agree on, so that they all take the same branch (throw, or go on) before
// their next collective.
#include <cstdint>

#include "runtime/dist/comm.h"

namespace trainer::train {

// Whether any rank's `flag` is set (an all-reduce with max over `world`; null: this rank alone).
inline bool any_rank(dist::Comm* world, bool flag) {
  if (world == nullptr || world->size() == 1) return flag;
  int64_t f = flag ? 1 : 0;
  world->all_reduce(&f, 1, dist::CommDType::i64, dist::ReduceOp::max);
  return f != 0;
}

}  // namespace trainer::train

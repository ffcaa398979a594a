#pragma once
// InFlightOps: the ops a communicator has issued and not yet seen finish, in issue order.
// Ops on one stream finish in issue order, so when a wait times out the op every member is stuck
// in is the oldest unfinished one, not the one this rank happened to wait on (an async bucket's
// wait covers the buckets issued before it). Naming the rank that failed compares members' arrival
// at that op (failure_report.h), so all of them must name the same one.
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

#include "runtime/dist/op_id.h"

namespace trainer::dist {

class InFlightOps {
 public:
  // Op `op` (issued after every op added before it); `finished` says whether it has finished.
  void add(OpId op, std::function<bool()> finished);
  // The oldest op not finished (the finished ones before it are dropped), or `otherwise` when
  // every op added has finished.
  OpId oldest_unfinished(const OpId& otherwise);
  size_t size() const;

 private:
  void drop_finished();  // from the front; mu_ held
  mutable std::mutex mu_;
  std::deque<std::pair<OpId, std::function<bool()>>> ops_;
};

}  // namespace trainer::dist

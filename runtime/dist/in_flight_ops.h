#pragma once
// InFlightOps: the ops a communicator has issued and not yet seen finish, by sequence number.
// Ops on one stream finish in issue order, so when a wait times out the op every member is stuck
// in is the oldest unfinished one, not the one this rank happened to wait on (an async bucket's
// wait covers the buckets issued before it). Naming the rank that failed compares members' arrival
// at that op (failure_report.h), so all of them must name the same one.
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

namespace trainer::dist {

class InFlightOps {
 public:
  // Op `seq` (issued after every op added before it); `finished` says whether it has finished.
  void add(uint64_t seq, std::function<bool()> finished);
  // The oldest op not finished (the finished ones before it are dropped), or `otherwise` when
  // every op added has finished.
  uint64_t oldest_unfinished(uint64_t otherwise);
  size_t size() const;

 private:
  void drop_finished();  // from the front; mu_ held
  mutable std::mutex mu_;
  std::deque<std::pair<uint64_t, std::function<bool()>>> ops_;
};

}  // namespace trainer::dist

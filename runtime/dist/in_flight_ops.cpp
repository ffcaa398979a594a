#include "runtime/dist/in_flight_ops.h"

namespace trainer::dist {

void InFlightOps::add(OpId op, std::function<bool()> finished) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_finished();  // keeps the queue as short as the ops actually in flight
  ops_.emplace_back(std::move(op), std::move(finished));
}

OpId InFlightOps::oldest_unfinished(const OpId& otherwise) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_finished();
  return ops_.empty() ? otherwise : ops_.front().first;
}

size_t InFlightOps::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_.size();
}

void InFlightOps::drop_finished() {
  while (!ops_.empty() && ops_.front().second()) ops_.pop_front();
}

}  // namespace trainer::dist

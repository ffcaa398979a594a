#pragma once
// DeviceTimer: points in a backend's stream of work, for profiling. mark() stands for "the work
// issued so far is done" and returns the mark's index; seconds() waits for every mark, returns each
// one's time since the first, and starts over. A backend whose ops run as they are called (cpu)
// marks with the host clock (make_host_timer); the cuda backend records an event on its compute
// stream, so marking never waits and a profiled step is not serialised.
#include <cstddef>
#include <memory>
#include <vector>

namespace trainer {

class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual size_t mark() = 0;
  virtual std::vector<double> seconds() = 0;  // one per mark since the last call; clears them
};

std::unique_ptr<DeviceTimer> make_host_timer();

}  // namespace trainer

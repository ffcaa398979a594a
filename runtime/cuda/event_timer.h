#pragma once
// EventTimer: the cuda backend's DeviceTimer. A mark is an event recorded on the compute stream
// (from a pool that grows to the most marks a step takes and is reused after seconds()); marking
// never waits, and seconds() waits once, for the last mark (a stream's events complete in order).
#include <cuda_runtime_api.h>

#include <vector>

#include "runtime/core/device_timer.h"

namespace trainer::cuda {

class EventTimer : public DeviceTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {}
  ~EventTimer() override;
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  size_t mark() override;
  std::vector<double> seconds() override;

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace trainer::cuda

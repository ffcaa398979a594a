#include "runtime/cuda/event_timer.h"

#include "runtime/cuda/cuda_check.h"

namespace trainer::cuda {

EventTimer::~EventTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

size_t EventTimer::mark() {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));  // with timing (cudaEventDefault)
    events_.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
  return used_++;
}

std::vector<double> EventTimer::seconds() {
  std::vector<double> s;
  if (used_ == 0) return s;
  CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
  s.reserve(used_);
  for (size_t i = 0; i < used_; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[i]));
    s.push_back(static_cast<double>(ms) * 1e-3);
  }
  used_ = 0;
  return s;
}

}  // namespace trainer::cuda

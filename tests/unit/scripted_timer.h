#pragma once
// A DeviceTimer whose marks land at scripted times: mark i (counted over the whole script) reads
// times[i] seconds.
#include <vector>

#include "runtime/core/device_timer.h"

namespace trainer::testing {

class ScriptedTimer : public DeviceTimer {
 public:
  explicit ScriptedTimer(std::vector<double> times) : times_(std::move(times)) {}
  size_t mark() override {
    marks_.push_back(times_.at(next_++));
    return marks_.size() - 1;
  }
  std::vector<double> seconds() override {
    std::vector<double> s;
    for (double t : marks_) s.push_back(t - marks_.front());
    marks_.clear();
    return s;
  }

 private:
  std::vector<double> times_, marks_;
  size_t next_ = 0;
};

}  // namespace trainer::testing

#include "runtime/core/device_timer.h"

#include <chrono>

namespace trainer {
namespace {

class HostTimer : public DeviceTimer {
 public:
  size_t mark() override {
    marks_.push_back(Clock::now());
    return marks_.size() - 1;
  }
  std::vector<double> seconds() override {
    std::vector<double> s;
    s.reserve(marks_.size());
    for (const auto& m : marks_) s.push_back(std::chrono::duration<double>(m - marks_[0]).count());
    marks_.clear();
    return s;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<DeviceTimer> make_host_timer() {
  return std::make_unique<HostTimer>();
}

}  // namespace trainer

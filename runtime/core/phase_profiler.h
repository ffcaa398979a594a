#pragma once
// PhaseProfiler: where a training step's time goes, by named phase ("fwd.qkv", "bwd.attention",
// "optimizer", ...), in device time. Between begin_step() and end_step() each phase is a pair of
// DeviceTimer marks; end_step() waits for the step's marks once and adds every phase's time, calls
// and FLOPs to its totals, and the step's span (first mark to last) to the span. Outside a step
// nothing is timed (evaluation, steps not profiled), so the model keeps its scopes in place.
// Phases do not nest: each is a leaf of the step, and the span minus their sum is time no phase
// covered (host work the device waited for, gaps between launches).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/core/device_timer.h"

namespace trainer {

class PhaseProfiler {
 public:
  struct Totals {
    std::string name;
    int64_t calls = 0;
    double seconds = 0;
    double flops = 0;  // as the caller counted them (0: not a math phase)
  };

  // Times one phase for its lifetime; does nothing with a null profiler.
  class Scope {
   public:
    Scope(PhaseProfiler* profiler, std::string_view name, double flops);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseProfiler* profiler_;
  };

  explicit PhaseProfiler(std::unique_ptr<DeviceTimer> timer);

  void begin_step();
  // Adds the step's phases to the totals. After drop_step() it only raises what failed.
  void end_step();
  // Forgets the step in progress (a Scope whose end mark threw); end_step() then calls the
  // timer's seconds(), which raises the failure (on cuda, the sticky device error).
  void drop_step() noexcept;
  bool in_step() const { return in_step_; }
  void begin(std::string_view name, double flops = 0);
  void end();

  int steps() const { return steps_; }
  double span_seconds() const { return span_s_; }                // summed over the profiled steps
  const std::vector<Totals>& totals() const { return totals_; }  // in order of first appearance

 private:
  struct Timed {
    size_t phase, begin_mark, end_mark;
    double flops;
  };
  std::unique_ptr<DeviceTimer> timer_;
  std::vector<Totals> totals_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<Timed> timed_;  // this step's
  bool in_step_ = false, open_ = false, dropped_ = false;
  size_t step_begin_mark_ = 0;
  int steps_ = 0;
  double span_s_ = 0;
};

}  // namespace trainer

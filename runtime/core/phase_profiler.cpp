#include "runtime/core/phase_profiler.h"

#include "runtime/core/check.h"

namespace trainer {

PhaseProfiler::Scope::Scope(PhaseProfiler* profiler, std::string_view name, double flops)
    : profiler_(profiler) {
  if (profiler_) profiler_->begin(name, flops);
}

PhaseProfiler::Scope::~Scope() {
  if (!profiler_) return;
  try {
    profiler_->end();
  } catch (...) {
    // The end mark failed (on cuda, a device fault that an event record reports; the fault is
    // sticky, so the next backend call or end_step() raises it). A destructor must not throw,
    // also not while an exception unwinds: drop the step's marks.
    profiler_->drop_step();
  }
}

PhaseProfiler::PhaseProfiler(std::unique_ptr<DeviceTimer> timer) : timer_(std::move(timer)) {}

void PhaseProfiler::begin_step() {
  TRAINER_CHECK(!in_step_, "begin_step() inside a profiled step");
  dropped_ = false;
  timer_->seconds();  // drop stray marks
  timed_.clear();
  in_step_ = true;
  step_begin_mark_ = timer_->mark();
}

void PhaseProfiler::begin(std::string_view name, double flops) {
  if (!in_step_) return;
  TRAINER_CHECK(!open_, "phase '" << name << "' begun inside phase '"
                                  << totals_[timed_.back().phase].name << "'");
  std::string key(name);
  auto it = index_.find(key);
  if (it == index_.end()) {
    it = index_.emplace(key, totals_.size()).first;
    totals_.push_back({std::move(key), 0, 0, 0});
  }
  timed_.push_back({it->second, timer_->mark(), 0, flops});
  open_ = true;
}

void PhaseProfiler::end() {
  if (!in_step_ || !open_) return;
  timed_.back().end_mark = timer_->mark();
  open_ = false;
}

void PhaseProfiler::drop_step() noexcept {
  timed_.clear();
  open_ = false;
  in_step_ = false;
  dropped_ = true;
}

void PhaseProfiler::end_step() {
  if (dropped_) {  // raise what made the step's marks fail (the timer's wait reports it)
    dropped_ = false;
    timer_->seconds();
    return;
  }
  TRAINER_CHECK(in_step_, "end_step() without begin_step()");
  TRAINER_CHECK(!open_, "end_step() inside phase '" << totals_[timed_.back().phase].name << "'");
  const size_t last = timer_->mark();
  const std::vector<double> s = timer_->seconds();
  for (const Timed& t : timed_) {
    Totals& p = totals_[t.phase];
    p.calls += 1;
    p.seconds += s[t.end_mark] - s[t.begin_mark];
    p.flops += t.flops;
  }
  span_s_ += s[last] - s[step_begin_mark_];
  ++steps_;
  timed_.clear();
  in_step_ = false;
}

}  // namespace trainer

#include "runtime/report/profile.h"

#include <algorithm>
#include <cmath>

#include <spdlog/fmt/fmt.h>

namespace trainer::report {

ProfileInfo summarize_profile(const PhaseProfiler& profiler, int64_t first_step) {
  ProfileInfo p;
  p.steps = profiler.steps();
  p.first_step = first_step;
  if (p.steps == 0) return p;
  const double steps = p.steps;
  p.step_time_s = profiler.span_seconds() / steps;
  double covered = 0;
  for (const PhaseProfiler::Totals& t : profiler.totals()) {
    PhaseTime q;
    q.name = t.name;
    q.calls_per_step = static_cast<double>(t.calls) / steps;
    q.time_s = t.seconds / steps;
    q.share = p.step_time_s > 0 ? q.time_s / p.step_time_s : 0;
    if (t.flops > 0 && t.seconds > 0) q.tflops = t.flops / t.seconds / 1e12;
    covered += q.time_s;
    p.phases.push_back(q);
  }
  p.unaccounted_s = p.step_time_s - covered;
  std::stable_sort(p.phases.begin(), p.phases.end(),
                   [](const PhaseTime& a, const PhaseTime& b) { return a.time_s > b.time_s; });
  return p;
}

std::vector<std::string> profile_table(const ProfileInfo& p) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format(
      "profile of {} step(s) from step {}: {:.3f} ms of device time per step, {:.3f} ms in no "
      "phase",
      p.steps, p.first_step, p.step_time_s * 1e3, p.unaccounted_s * 1e3));
  lines.push_back(fmt::format("  {:<28} {:>7} {:>11} {:>7} {:>9}", "phase", "calls", "ms/step",
                              "share", "TFLOP/s"));
  for (const PhaseTime& t : p.phases)
    lines.push_back(fmt::format(
        "  {:<28} {:>7.4g} {:>11.3f} {:>6.1f}% {:>9}", t.name, t.calls_per_step, t.time_s * 1e3,
        t.share * 100, std::isnan(t.tflops) ? std::string("-") : fmt::format("{:.2f}", t.tflops)));
  return lines;
}

}  // namespace trainer::report

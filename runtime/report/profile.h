#pragma once
// From a PhaseProfiler's totals to report.json's "profile" section and the table the run logs.
#include <string>
#include <vector>

#include "runtime/core/phase_profiler.h"
#include "runtime/report/run_report.h"

namespace trainer::report {

// Per-step means over the profiled steps, phases longest first; first_step is 1-based.
ProfileInfo summarize_profile(const PhaseProfiler& profiler, int64_t first_step);

// One header line, then one line per phase: calls, ms per step, share, TFLOP/s.
std::vector<std::string> profile_table(const ProfileInfo& profile);

}  // namespace trainer::report

#pragma once
// The static part of a run's report (run, hardware, parallel, batch, model, data) from its config
// and what the process learned at start-up. The loop fills the rest through ReportBuilder.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "runtime/config/run_config.h"
#include "runtime/report/flops.h"
#include "runtime/report/peak.h"
#include "runtime/report/run_report.h"

namespace trainer::report {

struct RunContext {
  int world_size = 1;
  int nodes = 1;
  std::string device_name;    // e.g. "NVIDIA H100 80GB HBM3"; "cpu" when empty on cpu
  PeakRate peak;              // from resolve_peak(cfg.hardware.peak_tflops, ...)
  std::string config_sha256;  // sha256 of config::to_yaml(cfg)
  std::optional<int64_t> resumed_from_step;
  std::vector<RunResume> resumes;              // the run's, oldest first (Checkpointing::resumes())
  std::string run_id;                          // Checkpointing::run_id()
  std::map<std::string, std::string> kernels;  // Backend::kernels() at the start
};

ModelDims model_dims(const config::ModelConfig& model);

// started_at is now; dp "auto" (0) resolves to world / (pp*cp*tp).
RunReport report_skeleton(const config::RunConfig& cfg, const RunContext& ctx);

}  // namespace trainer::report

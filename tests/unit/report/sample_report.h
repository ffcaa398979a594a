#pragma once
// A hand-built run for report and compare tests: `steps` steps of `tokens_per_step` tokens taking
// `step_time_s` each (after 3 slow warm-up steps), loss falling as 4 / sqrt(step).
#include <cmath>
#include <string>

#include "runtime/report/report_builder.h"

namespace trainer::report::testing {

struct SampleRun {
  std::string name = "a";
  int steps = 40;
  int64_t tokens_per_step = 4096;
  double step_time_s = 0.1;
  int world = 1;
  double peak_tflops = 1.0;
  int eval_every = 20;
};

inline double sample_loss(int step) {
  return 4.0 / std::sqrt(double(step));
}

inline RunReport sample_base(const SampleRun& s) {
  RunReport r;
  r.run.name = s.name;
  r.run.config_sha256 = "00ff";
  r.run.started_at = now_iso8601();
  r.hardware.device_count = s.world;
  r.hardware.device_name = "cpu";
  r.hardware.peak_tflops_per_device = s.peak_tflops;
  r.hardware.peak_source = "config";
  r.parallel.world_size = s.world;
  r.parallel.dp = s.world;
  r.batch.micro_batch = 4;
  r.batch.seq_len = 64;
  r.batch.global_batch_sequences = s.tokens_per_step / 64;
  r.batch.tokens_per_step = s.tokens_per_step;
  r.model.params = 1000000;
  r.model.flops_per_token = 6e6;
  r.data.train = "synthetic:markov";
  r.data.entropy_floor = 1.25;
  return r;
}

inline ReportBuilder sample_builder(const SampleRun& s) {
  ReportBuilder b(sample_base(s), 3.0, 10);
  for (int step = 1; step <= s.steps; ++step) {
    StepRecord rec;
    rec.step = step;
    rec.tokens = step * s.tokens_per_step;
    rec.loss = sample_loss(step);
    rec.grad_norm = 2.0 / step;
    rec.lr = 1e-3;
    rec.step_time_s = step <= 3 ? 10 * s.step_time_s : s.step_time_s;
    rec.clipped = rec.grad_norm > 1.0;
    b.record_step(rec);
    if (s.eval_every > 0 && step % s.eval_every == 0)
      b.record_eval({step, rec.tokens, sample_loss(step) + 0.1});
  }
  b.set_memory(std::vector<int64_t>(size_t(s.world), int64_t(1) << 30), {100, 100, 200, 600});
  return b;
}

inline RunReport sample_report(const SampleRun& s) {
  return sample_builder(s).finish("completed");
}

}  // namespace trainer::report::testing

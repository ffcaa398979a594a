#include "runtime/parallel/pipeline_schedule.h"

#include <algorithm>

#include "runtime/config/run_config.h"
#include "runtime/core/check.h"

namespace trainer::parallel {

PipeSchedule parse_pipe_schedule(const std::string& name) {
  if (name == "1f1b") return PipeSchedule::one_f_one_b;
  if (name == "gpipe") return PipeSchedule::gpipe;
  if (name == "interleaved")
    throw config::ConfigError(
        "parallel.pipeline.schedule = 'interleaved': the interleaved schedule (virtual stages) is "
        "not built yet; allowed are 1f1b, gpipe");
  throw config::ConfigError("parallel.pipeline.schedule = '" + name + "': allowed are 1f1b, gpipe");
}

std::vector<PipeStep> pipeline_steps(PipeSchedule schedule, int stage, int stages, int micros) {
  TRAINER_CHECK(stages >= 1 && stage >= 0 && stage < stages && micros >= 1,
                "pipeline stage " << stage << " of " << stages << ", " << micros << " micros");
  std::vector<PipeStep> steps;
  using A = PipeAction;
  if (schedule == PipeSchedule::gpipe) {
    for (int m = 0; m < micros; ++m)
      for (const A a : {A::recv_forward, A::forward, A::send_forward}) steps.push_back({a, m});
    for (int m = 0; m < micros; ++m)
      for (const A a : {A::recv_backward, A::backward, A::send_backward}) steps.push_back({a, m});
    return steps;
  }
  // Megatron's forward_backward_pipelining_without_interleaving, step for step.
  const int warmup = std::min(stages - stage - 1, micros), steady = micros - warmup;
  int f = 0, b = 0;  // the next micro-batch to run forward, backward
  for (int i = 0; i < warmup; ++i, ++f)
    for (const A a : {A::recv_forward, A::forward, A::send_forward}) steps.push_back({a, f});
  if (steady > 0) steps.push_back({A::recv_forward, f});
  for (int i = 0; i < steady; ++i, ++b) {
    steps.push_back({A::forward, f});
    steps.push_back({A::send_forward_recv_backward, f, b});
    ++f;
    steps.push_back({A::backward, b});
    if (i == steady - 1)
      steps.push_back({A::send_backward, b});
    else
      steps.push_back({A::send_backward_recv_forward, b, f});
  }
  for (int i = 0; i < warmup; ++i, ++b)
    for (const A a : {A::recv_backward, A::backward, A::send_backward}) steps.push_back({a, b});
  return steps;
}

int micros_in_flight(PipeSchedule schedule, int stage, int stages, int micros) {
  if (schedule == PipeSchedule::gpipe) return micros;
  return std::min(stages - stage, micros);
}

double bubble_fraction(int stages, int micros) {
  return static_cast<double>(stages - 1) / static_cast<double>(micros + stages - 1);
}

}  // namespace trainer::parallel

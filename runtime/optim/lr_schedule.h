#pragma once
// Learning-rate schedules: linear warmup, then constant | cosine | linear | wsd (warmup-stable-
// decay) towards lr * min_lr_ratio. As llm.c's (and Megatron's), the decay is a function of the
// 0-based step over `steps`, so it reaches lr * min_lr_ratio at step `steps`, one past the last:
// the last step runs a little above it (one decay step's worth: for wsd, 1 / its decay steps of
// the way).
#include "runtime/config/run_config.h"

namespace trainer::optim {

// lr for 0-based `step` of `cfg.steps`.
double learning_rate(const config::TrainConfig& cfg, int step);

}  // namespace trainer::optim

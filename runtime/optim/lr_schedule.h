#pragma once
// Learning-rate schedules: linear warmup, then constant | cosine | linear | wsd (warmup-stable-
// decay) down to lr * min_lr_ratio at the last step.
#include "runtime/config/run_config.h"

namespace trainer::optim {

// lr for 0-based `step` of `cfg.steps`.
double learning_rate(const config::TrainConfig& cfg, int step);

}  // namespace trainer::optim

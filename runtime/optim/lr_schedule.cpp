#include "runtime/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace trainer::optim {

double learning_rate(const config::TrainConfig& c, int step) {
  const double max_lr = c.lr, min_lr = c.lr * c.min_lr_ratio;
  if (step < c.warmup_steps) return max_lr * (step + 1) / c.warmup_steps;  // as llm.c
  if (c.schedule == "constant") return max_lr;
  const double span = std::max(1, c.steps - c.warmup_steps);
  double progress = std::clamp((step - c.warmup_steps) / span, 0.0, 1.0);
  if (c.schedule == "cosine")
    return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (max_lr - min_lr);
  if (c.schedule == "linear") return max_lr - progress * (max_lr - min_lr);
  // wsd: stable at max_lr, then a linear decay over the last decay_fraction of all steps.
  const double decay_steps = std::max(1.0, c.decay_fraction * c.steps);
  const double decay_start = c.steps - decay_steps;
  if (step < decay_start) return max_lr;
  progress = std::clamp((step - decay_start) / decay_steps, 0.0, 1.0);
  return max_lr - progress * (max_lr - min_lr);
}

}  // namespace trainer::optim

#pragma once
// Settings a run accepts but never reads, given the rest of its config (train.decay_fraction
// beside a cosine schedule, model.moe.top_k with no experts, ...). A user reading the YAML, or a
// report's config, would think they took effect; the run says at its start that they did not.
// Warned, not refused: one YAML file is often edited between schedules and layouts.
#include <string>
#include <vector>

#include "runtime/config/run_config.h"

namespace trainer::config {

// One line per setting, naming the key, its value and why nothing reads it. Only values other
// than the default are named (the embedded default spells out every key).
std::vector<std::string> unread_settings(const RunConfig& cfg);

}  // namespace trainer::config

#pragma once
// The parts of validate(): the process-grid shape and the data sources.
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::config {

// "model.n_head = 6"
inline std::string kv(const std::string& key, long long value) {
  return key + " = " + std::to_string(value);
}

// Resolves parallel.dp (auto -> world / (pp*cp*tp)) and checks that every size divides.
void validate_layout(RunConfig& cfg, int world_size);

// data.train / data.val: a synthetic source or a path / glob matching at least one file.
void validate_data_sources(const RunConfig& cfg);

}  // namespace trainer::config

#pragma once
// run_training: the whole `trainer train` run, top to bottom like torchtitan's train.py:
// config -> launch env -> mesh -> backend -> model -> data -> loop (step, log, eval) -> report.
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::train {

struct RunOptions {
  std::string resume = "auto";  // auto | none | DIR
};

// Returns the process exit status (0 on success). Throws config::ConfigError for bad input
// before any file is written, and anything else for failures (after writing a failed report).
int run_training(config::RunConfig cfg, const RunOptions& opts);

}  // namespace trainer::train

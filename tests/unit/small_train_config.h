#pragma once
// A run config for unit tests of the training step: a GPT small enough to step in milliseconds
// with every path exercised, micro_batch 2 and no warmup (the first step has the full lr).
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::testing {

inline config::RunConfig small_train_config(int vocab = 32, int seq_len = 16, int n_layer = 2,
                                            int d_model = 32, int n_head = 4) {
  config::RunConfig cfg;
  cfg.model.vocab_size = vocab;
  cfg.model.seq_len = seq_len;
  cfg.model.n_layer = n_layer;
  cfg.model.d_model = d_model;
  cfg.model.n_head = n_head;
  cfg.train.micro_batch = 2;
  cfg.train.warmup_steps = 0;
  return cfg;
}

// The pipeline tests' layout: 2 stages, micro-batches of 2 pieces, grad_accum 2, clipping on;
// `schedule` "1f1b", or "interleaved" with 2 chunks a stage (n_layer a multiple of 4).
inline void two_stage_pipeline(config::RunConfig& cfg, const std::string& schedule) {
  cfg.train.grad_accum = 2;
  cfg.train.grad_clip = 0.05;
  cfg.parallel.pp = 2;
  cfg.parallel.pipeline.microbatches = 2;
  cfg.parallel.pipeline.schedule = schedule;
  cfg.parallel.pipeline.virtual_stages = schedule == "interleaved" ? 2 : 1;
}

}  // namespace trainer::testing

#include "runtime/config/unread_settings.h"

#include <cstdio>

#include "runtime/config/field_value.h"
#include "runtime/config/schema.h"

namespace trainer::config {
namespace {

// A key, when nothing reads it, and why.
struct Reader {
  const char* key;
  bool (*unread)(const RunConfig&);
  const char* why;
};

bool no_experts(const RunConfig& c) {
  return c.model.moe.num_experts == 0;
}
bool no_pipeline(const RunConfig& c) {
  return c.parallel.pp == 1;
}
constexpr const char* kNoExperts = "model.moe.num_experts = 0 (dense blocks, no experts)";
constexpr const char* kNoPipeline = "parallel.pp = 1 (no pipeline)";

const Reader kReaders[] = {
    {"train.decay_fraction", [](const RunConfig& c) { return c.train.schedule != "wsd"; },
     "only train.schedule = wsd reads it"},
    {"train.min_lr_ratio", [](const RunConfig& c) { return c.train.schedule == "constant"; },
     "train.schedule = constant holds train.lr after the warmup"},
    {"train.eval_batches", [](const RunConfig& c) { return c.train.eval_every == 0; },
     "train.eval_every = 0 (no evals)"},
    {"data.val", [](const RunConfig& c) { return c.train.eval_every == 0; },
     "train.eval_every = 0 (no evals)"},
    {"model.moe.top_k", no_experts, kNoExperts},
    {"model.moe.capacity_factor", no_experts, kNoExperts},
    {"model.moe.aux_loss_coef", no_experts, kNoExperts},
    {"parallel.pipeline.schedule", no_pipeline, kNoPipeline},
    {"parallel.pipeline.microbatches", no_pipeline, kNoPipeline},
    {"parallel.sequence_parallel", [](const RunConfig& c) { return c.parallel.tp == 1; },
     "parallel.tp = 1 (no tensor parallelism to split the sequence over)"},
    {"data.shuffle", [](const RunConfig& c) { return c.data.train.starts_with("synthetic:"); },
     "the synthetic train source is generated in order and has no samples to shuffle"},
};

}  // namespace

std::vector<std::string> unread_settings(const RunConfig& cfg) {
  static const RunConfig defaults;
  std::vector<std::string> lines;
  for (const Reader& r : kReaders) {
    const Field& field = *find_field(r.key);
    const std::string value = field_text(cfg, field);
    if (value != field_text(defaults, field) && r.unread(cfg))
      lines.push_back(std::string(r.key) + " = " + value +
                      " changes nothing in this run: " + r.why);
  }
  // A warmup longer than the run: the lr never reaches train.lr (learning_rate()'s warmup).
  if (cfg.train.warmup_steps > cfg.train.steps) {
    char peak[32];
    std::snprintf(peak, sizeof peak, "%.3g", double(cfg.train.steps) / cfg.train.warmup_steps);
    lines.push_back("train.warmup_steps = " + std::to_string(cfg.train.warmup_steps) +
                    " is more than train.steps = " + std::to_string(cfg.train.steps) +
                    ": the lr never reaches train.lr (its last step's is " + peak + " x train.lr)");
  }
  return lines;
}

}  // namespace trainer::config

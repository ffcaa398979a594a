#include "runtime/config/schema.h"

#include <algorithm>
#include <sstream>

namespace trainer::config {
namespace {

// A FieldRef from a member path: FIELD(train.lr) -> accessor of cfg.train.lr.
#define FIELD(path)             \
  +[](RunConfig & c) -> auto& { \
    return c.path;              \
  }

constexpr double kInf = std::numeric_limits<double>::infinity();
const Range kAny{};
const Range kPositive{0, kInf, true, false};
const Range kNonNegative{0, kInf};
const Range kAtLeastOne{1, kInf};
const Range kUnit{0, 1};
const Range kUnitHalfOpen{0, 1, false, true};
const Range kAboveOne{1, kInf, true, false};

std::vector<Field> build_fields() {
  return {
      {"run.name", FIELD(run.name)},
      {"run.out_dir", FIELD(run.out_dir)},
      {"run.seed", FIELD(run.seed)},
      {"run.deterministic", FIELD(run.deterministic)},

      {"model.arch", FIELD(model.arch), {"gpt"}},
      // (at most 65536: llm.c token shards hold uint16 tokens)
      {"model.vocab_size", FIELD(model.vocab_size), {}, {2, 65536}},
      {"model.seq_len", FIELD(model.seq_len), {}, kPositive},
      // (each block costs the runtime and `trainer plan` its own tensors, buffers and ops: an
      // n_layer of 2^31 passed the 2^40 parameter cap at d_model 1 and then ran out of memory)
      {"model.n_layer", FIELD(model.n_layer), {}, {1, 65536}},
      {"model.d_model", FIELD(model.d_model), {}, kPositive},
      {"model.n_head", FIELD(model.n_head), {}, kPositive},
      {"model.ffn_mult", FIELD(model.ffn_mult), {}, kPositive},
      {"model.make_vocab_size_divisible_by",
       FIELD(model.make_vocab_size_divisible_by),
       {},
       {1, 65536}},
      {"model.moe.num_experts", FIELD(model.moe.num_experts), {}, kNonNegative},
      {"model.moe.top_k", FIELD(model.moe.top_k), {}, kAtLeastOne},
      // null: no capacity, every choice kept (Megatron's dropless)
      {"model.moe.capacity_factor",
       FIELD(model.moe.capacity_factor),
       {},
       kPositive,
       Special::null_is_infinite},
      {"model.moe.aux_loss_coef", FIELD(model.moe.aux_loss_coef), {}, kNonNegative},
      {"model.init_from", FIELD(model.init_from), {}, kAny, Special::null_is_empty},

      {"parallel.dp", FIELD(parallel.dp), {}, kNonNegative, Special::auto_is_zero},
      {"parallel.tp", FIELD(parallel.tp), {}, kAtLeastOne},
      {"parallel.pp", FIELD(parallel.pp), {}, kAtLeastOne},
      {"parallel.cp", FIELD(parallel.cp), {}, kAtLeastOne},
      {"parallel.ep", FIELD(parallel.ep), {}, kAtLeastOne},
      {"parallel.zero", FIELD(parallel.zero), {"0", "1", "2", "3"}},
      {"parallel.sequence_parallel", FIELD(parallel.sequence_parallel)},
      {"parallel.pipeline.schedule",
       FIELD(parallel.pipeline.schedule),
       {"1f1b", "gpipe", "interleaved"}},
      {"parallel.pipeline.microbatches", FIELD(parallel.pipeline.microbatches), {}, kAtLeastOne},
      {"parallel.pipeline.virtual_stages",
       FIELD(parallel.pipeline.virtual_stages),
       {},
       kAtLeastOne},
      {"parallel.bucket_mb", FIELD(parallel.bucket_mb), {}, kPositive},
      {"parallel.overlap_grad_reduce", FIELD(parallel.overlap_grad_reduce)},

      {"train.micro_batch", FIELD(train.micro_batch), {}, kAtLeastOne},
      {"train.grad_accum", FIELD(train.grad_accum), {}, kAtLeastOne},
      {"train.steps", FIELD(train.steps), {}, kAtLeastOne},
      {"train.stop_after_steps", FIELD(train.stop_after_steps), {}, kNonNegative},
      {"train.lr", FIELD(train.lr), {}, kPositive},
      {"train.min_lr_ratio", FIELD(train.min_lr_ratio), {}, kUnit},
      {"train.warmup_steps", FIELD(train.warmup_steps), {}, kNonNegative},
      {"train.schedule", FIELD(train.schedule), {"constant", "cosine", "linear", "wsd"}},
      {"train.decay_fraction", FIELD(train.decay_fraction), {}, kUnit},
      {"train.weight_decay", FIELD(train.weight_decay), {}, kNonNegative},
      {"train.beta1", FIELD(train.beta1), {}, kUnitHalfOpen},
      {"train.beta2", FIELD(train.beta2), {}, kUnitHalfOpen},
      {"train.eps", FIELD(train.eps), {}, kPositive},
      {"train.grad_clip", FIELD(train.grad_clip), {}, kNonNegative},
      {"train.eval_every", FIELD(train.eval_every), {}, kNonNegative},
      {"train.eval_batches", FIELD(train.eval_batches), {}, kAtLeastOne},
      {"train.spike_factor", FIELD(train.spike_factor), {}, kAboveOne},

      {"precision.compute", FIELD(precision.compute), {"fp32", "bf16", "fp8"}},
      {"precision.master_weights", FIELD(precision.master_weights), {"fp32"}},

      {"activation_checkpointing", FIELD(activation_checkpointing), {"none", "full", "selective"}},

      {"checkpoint.dir", FIELD(checkpoint.dir), {}, kAny, Special::null_is_empty},
      {"checkpoint.every_steps", FIELD(checkpoint.every_steps), {}, kNonNegative},
      {"checkpoint.keep", FIELD(checkpoint.keep), {}, kAtLeastOne},
      {"checkpoint.async", FIELD(checkpoint.async)},

      {"data.train", FIELD(data.train)},
      {"data.val", FIELD(data.val)},
      {"data.seed", FIELD(data.seed)},
      {"data.shuffle", FIELD(data.shuffle)},

      {"hardware.device", FIELD(hardware.device), {"cpu", "cuda"}},
      // from 0.1 GFLOP/s (a slow core) to 100 PFLOP/s: a figure outside made MFUs of 1e26
      {"hardware.peak_tflops", FIELD(hardware.peak_tflops), {}, {1e-4, 1e5}, Special::auto_is_zero},

      {"distributed.backend", FIELD(distributed.backend), {"auto", "gloo", "nccl"}},
      // from a millisecond (the unit of the collectives' timeouts) to a week
      {"distributed.timeout_s", FIELD(distributed.timeout_s), {}, {0.001, 7 * 24 * 3600.0}},

      {"logging.every_steps", FIELD(logging.every_steps), {}, kAtLeastOne},
      {"logging.level", FIELD(logging.level), {"trace", "debug", "info", "warn", "error"}},
      {"logging.profile_steps", FIELD(logging.profile_steps), {}, kNonNegative},
  };
}

#undef FIELD

std::string format_bound(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

bool Range::contains(double v) const {
  const bool above = lo_open ? v > lo : v >= lo;
  const bool below = hi_open ? v < hi : v <= hi;
  return above && below;
}

std::string Range::describe() const {
  if (hi == kInf) return (lo_open ? "> " : ">= ") + format_bound(lo);
  return std::string("in ") + (lo_open ? "(" : "[") + format_bound(lo) + ", " + format_bound(hi) +
         (hi_open ? ")" : "]");
}

const std::vector<Field>& config_fields() {
  static const std::vector<Field> fields = build_fields();
  return fields;
}

const Field* find_field(const std::string& key) {
  for (const Field& f : config_fields())
    if (f.key == key) return &f;
  return nullptr;
}

bool is_section(const std::string& path) {
  if (path.empty()) return true;
  const std::string prefix = path + ".";
  return std::any_of(config_fields().begin(), config_fields().end(),
                     [&](const Field& f) { return f.key.starts_with(prefix); });
}

std::vector<std::string> section_children(const std::string& section) {
  const std::string prefix = section.empty() ? "" : section + ".";
  std::vector<std::string> names;
  for (const Field& f : config_fields()) {
    if (!f.key.starts_with(prefix)) continue;
    const std::string rest = f.key.substr(prefix.size());
    const std::string child = rest.substr(0, rest.find('.'));
    if (std::find(names.begin(), names.end(), child) == names.end()) names.push_back(child);
  }
  return names;
}

}  // namespace trainer::config

// `trainer plan RUN.yaml [--set key=value ...]`: checks a config and prints its model size, batch
// and memory estimate (model state by the ZeRO formula, activations as the model allocates them).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/verbs.h"
#include "runtime/config/run_config.h"
#include "runtime/core/attention_state.h"
#include "runtime/model/activations.h"
#include "runtime/model/param_layout.h"
#include "runtime/parallel/zero_memory.h"
#include "runtime/report/flops.h"

namespace trainer::app {

namespace {

// The ZeRO formula's model-state bytes per rank for this config (runtime/parallel/zero_memory.h);
// a run's report.json memory.breakdown holds the measured side.
// Returns the total.
double print_zero_memory(const config::RunConfig& cfg, int64_t num_params, int dp) {
  const parallel::BytesPerParam b = parallel::bytes_per_param(cfg.precision.compute);
  const parallel::ZeroPrediction p =
      parallel::predict_zero_memory(cfg.parallel.zero, num_params, dp, b);
  std::printf(
      "memory per rank (ZeRO %d formula, dp %d, %s: params %d + grads %d + optimizer %d "
      "bytes/param): params %.0f B, grads %.0f B, optimizer %.0f B, total %.0f B (%.1f MiB)\n",
      cfg.parallel.zero, dp,
      cfg.precision.compute == "fp32" ? "fp32" : "fp32 master weights + bf16 copy, fp32 gradients",
      b.params, b.grads, b.optimizer, p.params, p.grads, p.optimizer, p.total(),
      p.total() / (1024.0 * 1024.0));
  return p.total();
}

// The activations of one micro-batch as Activations allocates them (report.json's
// memory.breakdown.activations): the cuda kinds keep flash attention's row statistics where the
// head size has flash kernels (unless TRAINER_ATTENTION=reference), the cpu the probabilities.
size_t print_activation_memory(const config::RunConfig& cfg, const std::string& gpu) {
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  const model::ParamLayout layout(dims, model::GptShard::whole(dims));
  const int B = cfg.train.micro_batch, T = cfg.model.seq_len;
  const bool flash =
      gpu != "cpu" && cuda_attention_uses_flash(attention_kernel_from_env(), dims.head_dim());
  const bool bf16 = cfg.precision.compute != "fp32", fp8 = cfg.precision.compute == "fp8";
  const size_t bytes = model::Activations::bytes_needed(
      layout, B, T, model::parse_recompute(cfg.activation_checkpointing),
      bf16 ? DType::bf16 : DType::f32, attention_state_shape_of(flash, B, dims.n_head, T), fp8);
  std::printf(
      "activations per rank (micro_batch %d x %d tokens, activation_checkpointing %s, %s, "
      "attention keeps %s): %zu B (%.1f MiB)\n",
      B, T, cfg.activation_checkpointing.c_str(),
      fp8    ? "bf16 activations + fp8 GEMMs' fp32 sums"
      : bf16 ? "bf16 activations"
             : "fp32",
      flash ? "row log-sum-exps" : "T x T probabilities", bytes, bytes / (1024.0 * 1024.0));
  return bytes;
}

}  // namespace

void register_plan(CLI::App& app) {
  struct Args {
    std::string config;
    int gpus = 1;
    std::string gpu = "cpu";
    std::vector<std::string> sets;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("plan",
                                     "Validate a run config for a number of devices and "
                                     "print its size, batch and memory estimate.");
  cmd->add_option("config", args->config, "Run config YAML")->required();
  cmd->add_option("--gpus", args->gpus, "Number of devices (ranks) to plan for")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gpu", args->gpu, "Device kind")
      ->check(CLI::IsMember({"h100", "h200", "a100", "cpu"}));
  cmd->add_option("--set", args->sets, "Override one key, as for train (repeatable)");
  cmd->callback([args] {
    config::RunConfig cfg = config::load_config_file(args->config, args->sets);
    config::validate(cfg, args->gpus);
    config::check_runnable(cfg);
    if (cfg.precision.compute == "fp8" && args->gpu != "h100" && args->gpu != "h200")
      throw config::ConfigError(
          "config: precision.compute = fp8 needs a Hopper GPU (--gpu h100 "
          "or h200); --gpu " +
          args->gpu + " runs bf16");
    const auto& m = cfg.model;
    const report::ModelDims md{m.vocab_size, m.seq_len, m.n_layer, m.d_model, m.ffn_mult};
    const report::ParamCounts pc = report::count_params(md);
    const int dp = cfg.parallel.dp > 0
                       ? cfg.parallel.dp
                       : args->gpus / (cfg.parallel.pp * cfg.parallel.cp * cfg.parallel.tp);
    const int64_t seqs = static_cast<int64_t>(cfg.train.micro_batch) * cfg.train.grad_accum * dp;
    std::printf("config %s is valid for %d %s device(s)\n", args->config.c_str(), args->gpus,
                args->gpu.c_str());
    std::printf("grid: dp %d x pp %d x cp %d x tp %d (ep %d), zero %d\n", dp, cfg.parallel.pp,
                cfg.parallel.cp, cfg.parallel.tp, cfg.parallel.ep, cfg.parallel.zero);
    std::printf("model: %lld params (%lld non-embedding), %.4g flops/token\n",
                static_cast<long long>(pc.total), static_cast<long long>(pc.non_embedding),
                report::flops_per_token(md));
    std::printf("batch: %lld sequences x %d tokens = %lld tokens/step\n",
                static_cast<long long>(seqs), m.seq_len, static_cast<long long>(seqs * m.seq_len));
    // Model state is allocated for the padded vocabulary (model.make_vocab_size_divisible_by).
    const model::GptDims dims = model::GptDims::from_config(m);
    const double state = print_zero_memory(
        cfg, model::ParamLayout(dims, model::GptShard::whole(dims)).total_numel(), dp);
    const size_t activations = print_activation_memory(cfg, args->gpu);
    std::printf("total per rank: %.0f B (%.1f MiB), before communication buffers and workspaces\n",
                state + static_cast<double>(activations),
                (state + static_cast<double>(activations)) / (1024.0 * 1024.0));
  });
}

}  // namespace trainer::app

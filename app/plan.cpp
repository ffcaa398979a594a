// `trainer plan RUN.yaml [--gpus N] [--gpu KIND] [--set key=value ...] [--search]`: checks a
// config and prints its model size, batch and memory estimate (model state by the ZeRO formula and
// as this runtime holds it, activations as the model allocates them); --search ranks the layouts
// that fit the devices (runtime/plan/layout_search.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/verbs.h"
#include "runtime/ckpt/export.h"
#include "runtime/config/run_config.h"
#include "runtime/core/attention_state.h"
#include "runtime/data/loader.h"
#include "runtime/data/token_source.h"
#include "runtime/model/param_layout.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/parallel/zero_memory.h"
#include "runtime/plan/layout_search.h"
#include "runtime/report/flops.h"
#include "runtime/report/report_from_config.h"
#include "runtime/train/checkpoint_space.h"

namespace trainer::app {

namespace {

// The ZeRO formula's model-state bytes per rank for this config (runtime/parallel/zero_memory.h);
// print_held_state says what this runtime holds.
void print_zero_memory(const config::RunConfig& cfg, int64_t num_params, int dp) {
  const parallel::BytesPerParam b = parallel::bytes_per_param(cfg.precision.compute);
  const parallel::ZeroPrediction p =
      parallel::predict_zero_memory(cfg.parallel.zero, num_params, dp, b);
  std::printf(
      "memory per rank (ZeRO %d formula, %d replicas, %s: params %d + grads %d + optimizer %d "
      "bytes/param): params %.0f B, grads %.0f B, optimizer %.0f B, total %.0f B (%.1f MiB)\n",
      cfg.parallel.zero, dp,
      cfg.precision.compute == "fp32" ? "fp32" : "fp32 master weights + bf16 copy, fp32 gradients",
      b.params, b.grads, b.optimizer, p.params, p.grads, p.optimizer, p.total(),
      p.total() / (1024.0 * 1024.0));
}

// Model state and ZeRO staging as this runtime holds them on the planned device
// (plan::held_state_bytes); the formula's line above is what ZeRO promises, this is what a run's
// report.json memory.breakdown will say (at ZeRO 3 the most any rank holds, where the report's
// breakdown is rank 0's). Returns it.
plan::HeldState print_held_state(const config::RunConfig& cfg, int dp,
                                 const plan::DeviceKind& device, int stage) {
  const plan::HeldState h = plan::held_state_bytes(cfg, cfg.parallel.zero, dp, device, stage);
  const parallel::ZeroPrediction& p = h.state;
  std::printf(
      "model state per rank as this runtime holds it (%s%s): params %.0f B, grads %.0f B, "
      "optimizer %.0f B, ZeRO staging %.0f B, total %.0f B (%.1f MiB)\n",
      !device.cuda ? "cpu backend: the formula, plus the units ZeRO 2 and 3 keep whole"
      : device.releases_pages
          ? "cuda backend: the formula, plus the units ZeRO 2 and 3 keep whole, a 2 MiB page "
            "at each end of their released ranges and a unit's pages kept for reuse"
          : "cuda backend with TRAINER_CUDA_UNMAP=0: params and grads buffers stay whole under "
            "ZeRO",
      dp == 1 && cfg.parallel.zero > 0 ? "; one replica trains as ZeRO 0"
      : cfg.parallel.zero == 3 && device.releases_pages && cfg.parallel.ep <= 1
          ? "; at ZeRO 3 the params the most any rank holds, its shard beside the gathered units"
          : "",
      p.params, p.grads, p.optimizer, h.zero_staging, h.total(), h.total() / (1024.0 * 1024.0));
  return h;
}

// The activations of one micro-batch (the pieces a pipeline stage keeps) as Activations allocates
// them (report.json's memory.breakdown.activations): the cuda kinds keep flash attention's row
// statistics where the head size has flash kernels (unless TRAINER_ATTENTION=reference), the cpu
// the probabilities. why_probabilities: said after "T x T probabilities" where a GPU keeps them.
size_t print_activation_memory(const config::RunConfig& cfg, bool flash, int stage,
                               const std::string& why_probabilities) {
  const size_t bytes = plan::activation_bytes(cfg, cfg.train.micro_batch,
                                              cfg.activation_checkpointing, flash, stage);
  const bool bf16 = cfg.precision.compute != "fp32", fp8 = cfg.precision.compute == "fp8";
  std::string batch = "micro_batch " + std::to_string(cfg.train.micro_batch);
  if (const int pp = cfg.parallel.pp; pp > 1) {
    const int micros = cfg.parallel.pipeline.microbatches;
    const int v = config::virtual_stages_of(cfg.parallel);
    batch =
        std::to_string(parallel::micros_in_flight(
            parallel::parse_pipe_schedule(cfg.parallel.pipeline.schedule), stage, pp, micros, v)) +
        " pieces in flight on stage " + std::to_string(stage) +
        (v > 1 ? " over its " + std::to_string(v) + " chunks" : "") + ", each " +
        std::to_string(cfg.train.micro_batch / micros);
  }
  std::printf(
      "activations per rank (%s x %d tokens%s, activation_checkpointing %s, %s, "
      "attention keeps %s%s): %zu B (%.1f MiB)\n",
      batch.c_str(), cfg.model.seq_len / cfg.parallel.cp,
      cfg.parallel.cp > 1 ? " (seq_len / cp; qkv gathered over cp)" : "",
      cfg.activation_checkpointing.c_str(),
      fp8    ? "bf16 activations + fp8 GEMMs' fp32 sums"
      : bf16 ? "bf16 activations"
             : "fp32",
      flash ? "row log-sum-exps" : "T x T probabilities",
      flash || why_probabilities.empty() ? "" : (": " + why_probabilities).c_str(), bytes,
      bytes / (1024.0 * 1024.0));
  return bytes;
}

// Byte counts in the table's unit, 2 decimals.
struct ByteUnit {
  const char* name;
  double bytes;
  std::string operator()(double n) const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", n / bytes);
    return buf;
  }
};

// The overrides a user gave, as they would pass them to train (quoted where the shell needs it),
// but those of the keys the search sets.
std::string set_options(const std::vector<std::string>& sets) {
  std::string out;
  for (const std::string& kv : sets) {
    const std::string key = kv.substr(0, kv.find('='));
    if (key == "parallel.zero" || key == "train.micro_batch" || key == "train.grad_accum" ||
        key == "activation_checkpointing" || key == "parallel.tp" || key == "parallel.dp" ||
        key == "parallel.sequence_parallel" || key == "parallel.pp" ||
        key == "parallel.pipeline.microbatches")
      continue;
    const bool plain = kv.find_first_of(" '\"*?$`\\") == std::string::npos;
    std::string quoted = "'";
    for (const char c : kv) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += " --set " + (plain ? kv : quoted + "'");
  }
  return out;
}

// `--search`: the ranked layouts (plan/layout_search.h), the fitting ones first. Returns whether
// any fits.
bool print_search(const plan::SearchRequest& request, const std::string& config_path,
                  const std::vector<std::string>& sets) {
  const std::vector<plan::Layout> layouts = plan::search_layouts(request);
  const config::RunConfig& cfg = request.cfg;
  if (layouts.empty())  // every micro_batch x grad_accum split overflows an int: cannot happen
    throw std::runtime_error("plan --search: no layout keeps " +
                             std::to_string(int64_t{cfg.train.micro_batch} * cfg.train.grad_accum) +
                             " sequences per rank");
  const auto fitting =
      std::count_if(layouts.begin(), layouts.end(), [](const plan::Layout& l) { return l.fits; });
  const double usable = request.usable_fraction * request.device.memory_bytes;
  double largest = usable;
  for (const plan::Layout& l : layouts) largest = std::max(largest, l.total());
  const ByteUnit gib{"GiB", 1024.0 * 1024.0 * 1024.0};
  const ByteUnit unit = largest >= gib.bytes ? gib : ByteUnit{"MiB", 1024.0 * 1024.0};
  const std::string u = unit.name;
  std::printf(
      "\nsearch: %d %s device(s) of %s %s; a layout fits when its estimate is within %.0f%% of "
      "that (%s %s), leaving the rest for %s\n",
      request.dp * cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.cp, request.device.name.c_str(),
      unit(request.device.memory_bytes).c_str(), unit.name, request.usable_fraction * 100,
      unit(usable).c_str(), unit.name,
      request.device.cuda ? "the CUDA context and NCCL's and cuBLASLt's buffers"
                          : "the process itself and Gloo's copies");
  std::printf(
      "search: every layout keeps the global batch of %lld sequences (micro_batch x grad_accum x "
      "dp), so its tokens stay as configured; precision stays %s; tp is each size that divides "
      "the devices, the heads, the MLP width and the padded vocabulary (wte's rows)%s, with and "
      "without sequence parallelism; pp "
      "each that divides the layers and the devices over tp (a stage's micro_batch all of its "
      "dp rank's sequences, cut into pieces of each size that divides them; ZeRO 0 and 1, over "
      "dp x cp); cp stays %d; dp the rest%s\n",
      static_cast<long long>(int64_t{cfg.train.micro_batch} * cfg.train.grad_accum * request.dp),
      cfg.precision.compute.c_str(),
      request.device.cuda ? " (up to 8 on GPUs: a node's NVLink domain)" : "", cfg.parallel.cp,
      cfg.model.moe.num_experts > 0
          ? ("; a mixture of experts keeps ep " + std::to_string(cfg.parallel.ep) +
             (cfg.parallel.ep > 1 ? " (dp x cp a multiple of it)" : "") +
             ", and at tp > 1 sequence parallelism with whole sequences per tp rank")
                .c_str()
          : ", ep 1");
  std::printf(
      "search: %zu layouts, %td fit; ranked by FLOPs per token (recompute) over the pipeline's "
      "busy share (1 - bubble), then smaller tp, then smaller pp, then dp traffic per step, then "
      "larger micro_batch, then lower ZeRO stage\n",
      layouts.size(), fitting);
  std::printf("%4s %3s %3s %3s %6s %6s %3s %4s %11s %10s %9s %9s %11s %11s %9s %4s %11s %14s\n",
              "rank", "tp", "sp", "pp", "pieces", "bubble", "dp", "zero", "micro_batch",
              "grad_accum", "recompute", ("state " + u).c_str(), ("staging " + u).c_str(),
              ("activ. " + u).c_str(), ("total " + u).c_str(), "fits", "flops/token",
              ("dp traffic " + u).c_str());
  const size_t shown_fitting = 10;
  size_t printed = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const plan::Layout& l = layouts[i];
    const bool show =
        (l.fits && printed < shown_fitting) || l.is_config || (!l.fits && i == size_t(fitting));
    if (!show) continue;
    if (l.fits) ++printed;
    char bubble[16] = "-";
    if (l.pp > 1) std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * l.bubble);
    std::printf(
        "%4zu %3d %3s %3d %6s %6s %3d %4d %11d %10d %9s %9s %11s %11s %9s %4s %10.3fx %14s%s\n",
        i + 1, l.tp, l.sequence_parallel ? "yes" : "no", l.pp,
        l.pp > 1 ? std::to_string(l.pieces).c_str() : "-", bubble, l.dp, l.zero, l.micro_batch,
        l.grad_accum, l.activation_checkpointing.c_str(), unit(l.held.state.total()).c_str(),
        unit(l.held.zero_staging).c_str(), unit(l.activations).c_str(), unit(l.total()).c_str(),
        l.fits ? "yes" : "no", l.flops_ratio, unit(l.dp_traffic_bytes).c_str(),
        l.is_config ? "  <- the config" : "");
  }
  if (fitting == 0) {
    std::printf("search: no layout fits; the smallest needs %s %s per rank\n",
                unit(layouts.front().total()).c_str(), unit.name);
    std::fflush(stdout);  // before the error line, when both go to one file
    std::fprintf(stderr, "error: no layout of this config fits %s %s per device\n",
                 unit(usable).c_str(), unit.name);
    return false;
  }
  const plan::Layout& best = layouts.front();
  const int world = best.dp * best.tp * best.pp * cfg.parallel.cp;  // (cp stays as configured)
  std::string pipeline =
      best.pp > 1 ? " --set parallel.pipeline.microbatches=" + std::to_string(best.pieces) : "";
  // The search ranks pipelines on 1F1B (or the config's GPipe), never interleaved: an
  // interleaved config's schedule goes too (its virtual stages need pp > 1, and were not ranked).
  if (cfg.parallel.pipeline.schedule == "interleaved")
    pipeline += " --set parallel.pipeline.schedule=1f1b --set parallel.pipeline.virtual_stages=1";
  const std::string ranks =
      world > 1 ? " on " + std::to_string(world) + " ranks (trainer launch, torchrun or srun)" : "";
  std::printf(
      "best, as options for trainer train %s%s%s: --set parallel.tp=%d --set "
      "parallel.sequence_parallel=%s --set parallel.pp=%d%s --set parallel.dp=%d --set "
      "parallel.zero=%d --set train.micro_batch=%d --set train.grad_accum=%d --set "
      "activation_checkpointing=%s\n",
      config_path.c_str(), set_options(sets).c_str(), ranks.c_str(), best.tp,
      best.sequence_parallel ? "true" : "false", best.pp, pipeline.c_str(), best.dp, best.zero,
      best.micro_batch, best.grad_accum, best.activation_checkpointing.c_str());
  std::printf(
      "best per rank: model state %.0f B + ZeRO staging %.0f B + activations %.0f B = %.0f B\n",
      best.held.state.total(), best.held.zero_staging, best.activations, best.total());
  return true;
}

}  // namespace

void register_plan(CLI::App& app) {
  struct Args {
    std::string config;
    int gpus = 1;
    std::string gpu = "cpu";
    std::vector<std::string> sets;
    bool search = false;
    double memory_gib = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("plan",
                                     "Validate a run config for a number of devices and "
                                     "print its size, batch and memory estimate; --search ranks "
                                     "the layouts that fit the devices.");
  cmd->add_option("config", args->config, "Run config YAML ('-': the embedded default)")
      ->required();
  cmd->add_option("--gpus", args->gpus, "Number of devices (ranks) to plan for")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--gpu", args->gpu, "Device kind")
      ->check(CLI::IsMember({"h100", "h200", "a100", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--set", args->sets, "Override one key, as for train (repeatable)");
  cmd->add_flag(
      "--search", args->search,
      "Rank the layouts (tp and sequence parallelism, pp and its pieces, ZeRO stage, micro_batch x "
      "grad_accum, activation checkpointing) that keep the global batch and fit the "
      "devices' memory; exits 1 when none fits");
  cmd->add_option("--memory-gib", args->memory_gib,
                  "Memory per device in GiB for --search (default: the --gpu kind's; cpu: this "
                  "machine's memory over --gpus)")
      ->check(CLI::Range(0.001, 1e6));
  cmd->callback([cmd, args] {
    if (std::isnan(args->memory_gib))  // CLI::Range lets NaN through
      throw config::ConfigError("plan: --memory-gib nan must be a number of GiB in [0.001, 1e6]");
    if (args->memory_gib > 0 && !args->search)
      throw config::ConfigError(
          "plan: --memory-gib is the device memory --search plans for; "
          "add --search");
    config::RunConfig cfg = config::load_config_file(args->config, args->sets);
    config::check_runnable(cfg);  // first: cp = 2 on one device is refused for what it is
    config::validate(cfg, args->gpus);
    if (!cfg.model.init_from.empty())  // (its header: what train would refuse)
      ckpt::check_init_from(cfg.model.init_from, model::GptDims::from_config(cfg.model));
    // Token shards as train opens them (headers, a shard too small for a global batch, a token
    // past the vocabulary in the first one): refused here, not at the run's start. (--search keeps
    // the global batch, so the config's dp stands for every layout.)
    for (const bool val : {false, true})
      if (const std::string& spec = val ? cfg.data.val : cfg.data.train;
          !data::is_synthetic_spec(spec) && (!val || cfg.train.eval_every > 0))
        const data::DataLoader opened(data::loader_options(cfg, 0, cfg.parallel.dp, val));
    AttentionKernel attention;  // read before anything is printed
    try {
      attention = attention_kernel_from_env();
    } catch (const std::invalid_argument& e) {
      throw config::ConfigError(e.what());
    }
    if (cfg.precision.compute == "fp8" && args->gpu != "h100" && args->gpu != "h200")
      throw config::ConfigError(
          "config: precision.compute = fp8 needs a Hopper GPU (--gpu h100 "
          "or h200); --gpu " +
          args->gpu + " runs bf16");
    const auto& m = cfg.model;
    const report::ModelDims md = report::model_dims(m);
    const report::ParamCounts pc = report::count_params(md);
    const int dp = cfg.parallel.dp;  // (resolved by validate)
    const int64_t seqs = static_cast<int64_t>(cfg.train.micro_batch) * cfg.train.grad_accum * dp;
    // the gradients' replicas: ZeRO shards over dp x cp (train::DataParallel)
    const int replicas = dp * cfg.parallel.cp;
    if (const int64_t fewest = plan::smallest_rank_numel(cfg); replicas > fewest)
      throw config::ConfigError(
          "plan: --gpus " + std::to_string(args->gpus) + " makes " + std::to_string(replicas) +
          " gradient replicas (dp x cp), more than the " + std::to_string(fewest) +
          " parameters a rank holds, which the gradient reduction cuts over them: plan for fewer "
          "devices or a larger model");
    std::printf("config %s is valid for %d %s device(s)\n", args->config.c_str(), args->gpus,
                args->gpu.c_str());
    if (cmd->count("--gpu") == 0 && cfg.hardware.device == "cuda")
      std::printf(
          "note: hardware.device is cuda, and this plans for the cpu; pass --gpu h100, "
          "h200 or a100 to plan for a GPU\n");
    std::printf("grid: dp %d x pp %d x cp %d x tp %d (ep %d), zero %d\n", dp, cfg.parallel.pp,
                cfg.parallel.cp, cfg.parallel.tp, cfg.parallel.ep, cfg.parallel.zero);
    std::printf("model: %lld params (%lld non-embedding), %.4g flops/token\n",
                static_cast<long long>(pc.total), static_cast<long long>(pc.non_embedding),
                report::flops_per_token(md));
    if (md.num_experts > 0)
      std::printf("experts: %lld per block, top %lld per token: %lld non-embedding params active\n",
                  static_cast<long long>(md.num_experts), static_cast<long long>(md.top_k),
                  static_cast<long long>(pc.active_non_embedding));
    std::printf("batch: %lld sequences x %d tokens = %lld tokens/step\n",
                static_cast<long long>(seqs), m.seq_len, static_cast<long long>(seqs * m.seq_len));
    // Model state is allocated for the padded vocabulary (model.make_vocab_size_divisible_by).
    // Under pipeline parallelism the numbers per rank are the heaviest stage's.
    const model::GptDims dims = model::GptDims::from_config(m);
    const plan::DeviceKind device = plan::device_kind(args->gpu, args->gpus, args->memory_gib);
    // (context parallelism too: CudaBackend::attention_cp_state_shape)
    const bool flash = device.cuda && cuda_attention_uses_flash(attention, dims.head_dim());
    const int pp = cfg.parallel.pp;
    const int stage = plan::heaviest_stage(cfg, cfg.parallel.zero, replicas, device, flash);
    if (pp > 1) {
      const int micros = cfg.parallel.pipeline.microbatches;
      const int v = config::virtual_stages_of(cfg.parallel);
      const std::string chunks = v > 1 ? " in " + std::to_string(v) + " chunks of " +
                                             std::to_string(m.n_layer / pp / v) +
                                             " (stage s holds virtual stages s, s + pp, ...)"
                                       : "";
      std::printf(
          "pipeline: %d stages of %d layers%s (the first also the embeddings, the last the head "
          "on a tied copy of wte), %s over %d pieces of %d sequences per micro-batch: bubble "
          "%.1f%% of a step; %.0f B sent per step between stages by the busiest rank (%.1f MiB); "
          "per rank "
          "below: stage %d, the one that needs the most\n",
          pp, m.n_layer / pp, chunks.c_str(), cfg.parallel.pipeline.schedule.c_str(), micros,
          cfg.train.micro_batch / micros, 100 * parallel::bubble_fraction(pp, micros, v),
          plan::pp_sent_bytes(cfg), plan::pp_sent_bytes(cfg) / (1024.0 * 1024.0), stage);
    }
    print_zero_memory(cfg, plan::rank_layout(cfg, stage).total_numel(), replicas);
    const plan::HeldState held_state = print_held_state(cfg, replicas, device, stage);
    const double held = held_state.total();
    std::string why_probabilities;  // on a GPU, where the flash kernels would not keep them
    if (device.cuda && !flash)
      why_probabilities = attention == AttentionKernel::reference
                              ? "TRAINER_ATTENTION=reference"
                              : "head size " + std::to_string(dims.head_dim()) +
                                    " has no flash kernel (they take " + flash_head_sizes_text() +
                                    ")";
    const size_t activations = print_activation_memory(cfg, flash, stage, why_probabilities);
    if (const plan::TpTraffic t = plan::tp_traffic(cfg); t.collectives > 0)
      std::printf(
          "tp traffic per rank per step: %lld collectives (%s) of a micro-batch's activations, "
          "%.0f B sent by ring algorithms (%.1f MiB)\n",
          static_cast<long long>(t.collectives),
          cfg.parallel.sequence_parallel ? "all-gathers and reduce-scatters"
                                         : "all-reduces, and the loss statistics' all-gather",
          t.sent_bytes, t.sent_bytes / (1024.0 * 1024.0));
    if (const plan::CpTraffic t = plan::cp_traffic(cfg); t.collectives > 0)
      std::printf(
          "cp traffic per rank per step: %lld collectives (each block's qkv all-gathered in "
          "forward%s and backward, its gradient reduce-scattered), %.0f B sent by ring algorithms "
          "(%.1f MiB)\n",
          static_cast<long long>(t.collectives),
          cfg.activation_checkpointing == "none" ? "" : ", recompute", t.sent_bytes,
          t.sent_bytes / (1024.0 * 1024.0));
    if (const plan::EpTraffic t = plan::ep_traffic(cfg); t.collectives > 0)
      std::printf(
          "ep traffic per rank per step: %lld all-to-alls (each block's tokens to their experts "
          "and back in forward%s and backward), %.0f B sent (%.1f MiB)\n",
          static_cast<long long>(t.collectives),
          cfg.activation_checkpointing == "full" ? ", recompute" : "", t.sent_bytes,
          t.sent_bytes / (1024.0 * 1024.0));
    std::printf("total per rank: %.0f B (%.1f MiB), before communication buffers and workspaces\n",
                held + static_cast<double>(activations),
                (held + static_cast<double>(activations)) / (1024.0 * 1024.0));
    if (const int saves = train::certain_saves(cfg, 0, cfg.train.last_step(), false); saves > 0)
      std::printf(
          "checkpoints: about %s each (fp32 weights and AdamW's two moments, 12 bytes a "
          "parameter, over every rank's file), %d at once in checkpoint.dir at most (%d saves, "
          "keep %d, and the save before the prune)\n",
          train::bytes_text(train::checkpoint_bytes(cfg, args->gpus)).c_str(),
          static_cast<int>(std::min(int64_t{cfg.checkpoint.keep} + 1, int64_t{saves})), saves,
          cfg.checkpoint.keep);
    if (!args->search) return;
    if (!print_search({cfg, dp, device, 0.9, flash, args->gpus}, args->config, args->sets))
      g_exit_code = 1;
  });
}

}  // namespace trainer::app

#include "runtime/train/run.h"

#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "runtime/ckpt/export.h"
#include "runtime/config/data_paths.h"
#include "runtime/config/unread_settings.h"
#include "runtime/core/backend.h"
#include "runtime/core/host_name.h"
#include "runtime/core/log_format.h"
#include "runtime/core/out_of_memory.h"
#include "runtime/core/sha256.h"
#include "runtime/data/loader.h"
#include "runtime/data/shard_summary.h"
#include "runtime/dist/launch_env.h"
#include "runtime/dist/mesh.h"
#include "runtime/dist/rendezvous.h"
#include "runtime/model/gpt.h"
#include "runtime/parallel/zero_layout.h"
#include "runtime/report/flops.h"
#include "runtime/report/metrics.h"
#include "runtime/report/peak.h"
#include "runtime/report/report_builder.h"
#include "runtime/report/report_from_config.h"
#include "runtime/report/run_report.h"
#include "runtime/train/checkpointing.h"
#include "runtime/train/data_agreement.h"
#include "runtime/train/device_comms.h"
#include "runtime/train/process_stats.h"
#include "runtime/train/rank_agreement.h"
#include "runtime/train/run_agreement.h"
#include "runtime/train/run_dir_lock.h"
#include "runtime/train/run_setup.h"
#include "runtime/train/run_stats.h"
#include "runtime/train/shared_dir_check.h"
#include "runtime/train/step_loop.h"
#include "runtime/train/stop_signals.h"
#include "runtime/train/train_step.h"

namespace trainer::train {
namespace {

void setup_logging(const config::RunConfig& cfg, int rank) {
  use_run_log_format();
  spdlog::set_level(spdlog::level::from_str(cfg.logging.level));
  if (rank != 0 && spdlog::get_level() < spdlog::level::warn)
    spdlog::set_level(spdlog::level::warn);
}

// A dp rank's data: its train stream, and where evals run its val stream (which must hold one
// global batch) and the global batches an eval reads.
struct DataStreams {
  std::unique_ptr<data::DataLoader> train, val;
  int64_t eval_batches = 0;
};

DataStreams open_data(const config::RunConfig& cfg, int dp_rank, int dp_size, bool lead) {
  DataStreams d;
  d.train = std::make_unique<data::DataLoader>(data::loader_options(cfg, dp_rank, dp_size, false));
  if (cfg.train.eval_every <= 0) return d;
  d.val = std::make_unique<data::DataLoader>(data::loader_options(cfg, dp_rank, dp_size, true));
  // Every eval reads from the start of the val data; past its end it would count tokens twice.
  d.eval_batches = std::min<int64_t>(cfg.train.eval_batches, d.val->samples_per_epoch());
  if (!lead) return d;
  if (d.eval_batches < cfg.train.eval_batches)
    spdlog::warn(
        "train.eval_batches = {}, but data.val holds only {} global batch(es) of {} tokens: each "
        "eval reads those {}",
        cfg.train.eval_batches, d.eval_batches, d.val->tokens_per_sample(), d.eval_batches);
  if (const std::vector<std::string> skipped = d.val->skipped_shards(); !skipped.empty())
    spdlog::warn(
        "data.val: {} shard(s) hold fewer tokens than one global batch and are skipped ({}{})",
        skipped.size(), skipped.front(), skipped.size() > 1 ? ", ..." : "");
  const std::vector<std::string> shared = config::shared_data_files(cfg.data.train, cfg.data.val);
  if (!shared.empty())
    spdlog::warn(
        "data.val shares {} file(s) with data.train ({}{}): the val loss measures the model on "
        "tokens it trains on",
        shared.size(), shared.front(), shared.size() > 1 ? ", ..." : "");
  return d;
}

// A failure inside the loop (a collective that timed out, a dead peer) names its step.
std::string failure_text(const std::string& what, int step_running) {
  return step_running > 0 ? "step " + std::to_string(step_running) + ": " + what : what;
}

// Whether <out_dir>/report.json is missing, unreadable, says the run failed or is running (it
// was killed), or reports fewer steps than the checkpoint holds (the job was killed between that
// checkpoint and its report): what a re-run with nothing to train writes again.
bool report_is_behind(const std::string& out_dir, int checkpoint_step) {
  try {
    const nlohmann::json run = report::load_report(out_dir + "/report.json")["run"];
    const std::string status = run.value("status", "");
    return status == "failed" || status == "running" ||
           run.value("steps_completed", int64_t{0}) < checkpoint_step;
  } catch (const std::exception&) {
    return true;
  }
}

// How long a failing rank keeps serving the store (Store::linger) for the ranks still finding
// out: they fail within about a step of it, when blocked on the same dead or hung peer, and then
// take a few graces of timeout/10 (0.2-2 s each) to name it (failure_report.cpp). Bounded: a hung
// peer's connection never closes, and it must not hold this process for its whole timeout.
std::chrono::milliseconds store_linger(double timeout_s) {
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::clamp(timeout_s / 2, 1.0, 30.0) * 1000));
}

void log_banner(const report::RunReport& base, const report::RunContext& ctx,
                const dist::MeshShape& shape, const data::DataLoader& loader) {
  spdlog::info("model: {} params ({} non-embedding), {:.3g} flops/token", base.model.params,
               base.model.non_embedding_params, base.model.flops_per_token);
  if (base.model.num_experts > 0)
    spdlog::info("experts: {} per block, top {} per token: {} non-embedding params active",
                 base.model.num_experts, base.model.top_k, base.model.active_non_embedding_params);
  spdlog::info(
      "grid: world {} = dp {} x pp {} x cp {} x tp {}, zero {}; global batch {} sequences "
      "({} tokens/step); {}",
      ctx.world_size, shape.dp, shape.pp, shape.cp, shape.tp, base.parallel.zero_stage,
      base.batch.global_batch_sequences, base.batch.tokens_per_step, loader.describe());
  spdlog::info("peak {:.3f} TFLOP/s per device ({})", ctx.peak.tflops, ctx.peak.source);
}

// Token shards a run reads more than once: said at the start (Megatron's and llm.c's loaders wrap
// as this one does; a user who sized train.steps for one pass should know).
void warn_of_repeated_data(const report::DataInfo& data, int64_t tokens_at_end, int last_step) {
  if (!data.train_tokens_per_pass || *data.train_tokens_per_pass <= 0) return;
  const double passes = double(tokens_at_end) / double(*data.train_tokens_per_pass);
  if (passes <= 1.0) return;
  spdlog::warn(
      "one pass over data.train is {} tokens (the whole global batches its shards hold); the "
      "run's {} steps read {} tokens: {:.2f} passes, the data read again after the first",
      *data.train_tokens_per_pass, last_step, tokens_at_end, passes);
}

// A re-run of a finished (or stopped-here) job, e.g. a requeue, resumed at first_step >= last:
// nothing to train, and the earlier run's report.json and metrics.jsonl stay as they are; unless
// its report is missing, says it failed or holds fewer steps than the checkpoint (lost to a full
// disk, or the job died after its last checkpoint): then this run writes it again, from the
// checkpoint and metrics.jsonl, as a resume that ran no step (returns true). Rank 0 decides, and
// logs what is done.
bool should_rewrite_report(const config::RunConfig& cfg, dist::Comm* world, bool lead,
                           int first_step, int last) {
  const bool rewrite = any_rank(world, lead && report_is_behind(cfg.run.out_dir, first_step));
  if (!lead) return rewrite;
  // A checkpoint past the end (train.steps lowered since) may not be what was meant.
  spdlog::log(first_step > last ? spdlog::level::warn : spdlog::level::info,
              "nothing to train: resumed at step {}, and this run ends at step {} (train.steps "
              "{}{}); {}",
              first_step, last, cfg.train.steps,
              cfg.train.stop_after_steps > 0
                  ? ", train.stop_after_steps " + std::to_string(cfg.train.stop_after_steps)
                  : std::string(),
              rewrite ? "report.json is missing, says the run failed or was running, or is behind "
                        "the checkpoint: it is written again from the checkpoint and metrics.jsonl"
                      : "report.json and metrics.jsonl are left as they were");
  return rewrite;
}

// What the report says of where the run ran (every rank calls it: the node count is gathered).
report::RunContext run_context(const config::RunConfig& cfg, int world_size, dist::Comm* world,
                               const Backend& backend, const Checkpointing& checkpoints,
                               int first_step, int last) {
  report::RunContext ctx;
  ctx.world_size = world_size;
  ctx.nodes = count_nodes(world);
  ctx.device_name = backend.name();
  ctx.kernels = backend.kernels();
  ctx.peak = report::resolve_peak(cfg.hardware.peak_tflops, cfg.hardware.device, ctx.device_name);
  // The cpu's peak is each rank's sgemm, timed while its peers time theirs beside it, and slowed
  // by whatever else loads the machine then: the best rank's figure is the least disturbed.
  if (ctx.peak.source == "measured-sgemm" && world != nullptr && world->size() > 1)
    world->all_reduce(&ctx.peak.tflops, 1, dist::CommDType::f64, dist::ReduceOp::max);
  ctx.config_sha256 = config::config_sha256(cfg);
  if (first_step > 0) ctx.resumed_from_step = first_step;
  ctx.resumes = checkpoints.resumes();
  ctx.run_id = checkpoints.run_id();
  // (a requeue with nothing to train ran no step under what it changed)
  if (first_step >= last && !ctx.resumes.empty()) ctx.resumes.pop_back();
  return ctx;
}

// The report before any step: the config's figures (model size, batch, peak) and the data's
// (`lead`: with the shards' fingerprints, which read a little of every shard).
report::RunReport report_base(const config::RunConfig& cfg, const report::RunContext& ctx,
                              const DataStreams& data, bool lead) {
  report::RunReport base = report::report_skeleton(cfg, ctx);
  const data::DataLoader& train = *data.train;
  const double floor = train.entropy_floor();  // NaN: token shards
  if (!std::isnan(floor)) base.data.entropy_floor = floor;
  if (data.val) {
    base.data.val = cfg.data.val;
    base.data.val_tokens_per_eval = data.eval_batches * data.val->tokens_per_sample();
    if (lead) base.data.val_shards_sha256 = data::shards_fingerprint(*data.val);
  }
  if (lead) base.data.train_shards_sha256 = data::shards_fingerprint(train);
  if (std::isnan(floor))
    base.data.train_tokens_per_pass = train.samples_per_epoch() * train.tokens_per_sample();
  return base;
}

}  // namespace

int run_training(config::RunConfig cfg, const RunOptions& opts) {
  // 1. Where this process sits; the config is checked against it before anything is written.
  const dist::LaunchEnv env = dist::detect_launch_env();
  // Gloo picks the interface it listens on from MASTER_ADDR (gloo_comm.cpp); under Slurm the
  // address comes from the nodelist, so export it as torchrun does (never overriding the user's).
  if (env.world_size > 1) ::setenv("MASTER_ADDR", env.master_addr.c_str(), 0);
  config::check_runnable(cfg);  // first: pp = 2 on one process is refused for what it is
  config::validate(cfg, env.world_size);
  if (!cfg.model.init_from.empty())
    ckpt::check_init_from(cfg.model.init_from, model::GptDims::from_config(cfg.model));
  config::check_output_dirs(cfg);
  setup_logging(cfg, env.rank);
  if (env.rank == 0)
    for (const std::string& line : config::unread_settings(cfg)) spdlog::warn("config: {}", line);
  // A reader of the log that goes away (`trainer train ... | head`) must not end the run without
  // its checkpoint and report: writes to the closed pipe then fail quietly.
  ::signal(SIGPIPE, SIG_IGN);
  const dist::MeshShape shape = dist::resolve_mesh_shape(cfg.parallel, env.world_size);

  // 2. Rendezvous, the backend (device LOCAL_RANK), then the process grid's communicators, whose
  // dp and tp groups are NCCL on the cuda backend (device_comms.h).
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.distributed.timeout_s * 1000));
  std::shared_ptr<dist::Store> store;
  if (env.world_size > 1) store = dist::make_rendezvous_store(env, timeout);
  const bool lead = env.rank == 0;
  std::optional<report::ReportBuilder> builder;  // outside the try: a failed run still reports
  int step_running = 0;  // the 1-based step in progress, named in a failure (0: none)
  // Rank 0's profile, summarized and logged as soon as its window ends (or the run stops inside
  // it): a run that fails later still reports it.
  std::optional<report::ProfileInfo> profile;
  StopSignals stop_signals;  // (stop_signals.h: held until the failure report is written)
  // Rank 0 holds its run's directories (run_dir_lock.h) until the last report is written; every
  // rank refuses the run with rank 0's reason when one is in use.
  RunDirLocks dir_locks;
  const auto lock_run_dirs = [&](dist::Comm* world, bool existing_only) {
    rank0_decides(world, env.rank, [&] {
      dir_locks.take(cfg, existing_only);
      return std::string();
    });
  };
  // A failure, recorded once: in the store ("failed/<rank>", for the peers that name it) and, on
  // rank 0, in the failed report.json. Before the teardown where it can: peers that see this
  // rank's sockets close must find the reason, and the teardown may wait on a hung peer longer
  // than a launcher's SIGTERM-to-SIGKILL grace. Never throws over the failure itself.
  bool failure_recorded = false;
  const auto record_failure = [&](const std::string& what) {
    if (failure_recorded) return;
    failure_recorded = true;
    if (store) dist::report_failure(*store, env.rank, what);
    if (!lead || !builder) return;
    try {
      report::RunReport failed = builder->finish("failed", what);
      failed.profile = profile;
      report::write_report(failed, cfg.run.out_dir);
    } catch (const std::exception& e) {
      spdlog::error("could not write the failed run's report: {}", e.what());
    }
  };

  try {
    // Every rank runs what rank 0 runs (run_agreement.h), before anything is read or allocated.
    if (store) try {
        agree_on_the_run(*store, env.rank, env.world_size, cfg);
      } catch (const DuplicateRank&) {
        failure_recorded = true;  // (not a failure of the run whose store this is)
        throw;
      }
    std::unique_ptr<Backend> backend;
    try {
      backend = make_backend(cfg.hardware.device, env.local_rank);
    } catch (const std::invalid_argument& e) {
      // an environment setting the backend reads (TRAINER_ATTENTION, TRAINER_CUDA_UNMAP, ...)
      // out of its values: bad input, as `trainer plan` calls it
      throw config::ConfigError(e.what());
    } catch (const std::exception& e) {
      // No GPU here, or a binary built without CUDA: the config asks for what this machine has
      // not (bad input, named as such), not a fault of the run.
      if (cfg.hardware.device != "cuda" || cuda_backend_available()) throw;
      throw config::ConfigError("config: hardware.device = cuda: " + std::string(e.what()) +
                                "; use hardware.device = cpu");
    }
    // The grid and its communicators after the backend, so destroyed before it, also when an
    // error unwinds: an NCCL comm then aborts its collectives in flight (a dead peer's), which the
    // backend's cudaFree of its arena would otherwise wait on, leaving this rank hanging.
    dist::Mesh mesh(env.rank, env.world_size, shape);
    try {
      check_backend_runs(cfg, *backend, shape);
      if (env.world_size > 1) {
        mesh.create_comms(make_comm_factory(store, *backend, shape.cp > 1, shape.ep > 1),
                          cfg.distributed.timeout_s);
        if (lead)
          spdlog::info("collectives: dp{}{}{}{} over {}, world over gloo",
                       shape.tp > 1 ? ", tp" : "", shape.pp > 1 ? ", pp" : "",
                       shape.cp > 1 ? ", cp" : "", shape.ep > 1 ? ", ep, edp" : "",
                       dp_transport(*backend));
      }
      // Ranks are numbered node by node and tp fastest, so a tp group stays on one node exactly
      // when tp divides the ranks per node.
      if (lead && shape.tp > 1 && env.local_world_size % shape.tp != 0)
        spdlog::warn(
            "parallel.tp = {} with {} rank(s) per node: tp groups span nodes, and their "
            "collectives (several in every layer) cross the network; keep tp a divisor of the "
            "ranks per node",
            shape.tp, env.local_world_size);
      const RankGroups groups = rank_groups(mesh, shape, env.world_size);
      dist::Comm* const world = groups.world;

      // 3. The model: this rank's slice (rank_shard), its ZeRO stage's buffers released where
      // ZeroOptimizer runs, and the step that trains it.
      const model::GptShard shard = rank_shard(cfg, mesh, shape);
      const model::StateMemory memory =
          parallel::zero_state_memory(cfg.parallel.zero, groups.replicas.size());
      model::Gpt gpt(*backend, model::GptDims::from_config(cfg.model), shard, memory);
      gpt.set_compute_bf16(cfg.precision.compute == "bf16");
      gpt.set_compute_fp8(cfg.precision.compute == "fp8");  // bf16, plus the fp8 forward GEMMs
      TrainStep trainer(cfg, *backend, gpt, groups.replicas, groups.tp, groups.pp, groups.cp,
                        groups.ep);
      trainer.init_weights(cfg.run.seed);
      log_what_rank_holds(gpt, shard, memory, *backend);

      // 4. Data: each dp rank reads its own slice of the stream.
      DataStreams data = open_data(cfg, groups.dp.rank(), groups.dp.size(), lead);
      data::DataLoader* const train_loader = data.train.get();
      check_every_rank_reads_the_same_shards(world, env.rank, cfg, *train_loader);

      // 4b. Start state: a checkpoint (--resume), model.init_from, or the fresh init above.
      stop_signals.catch_now();
      Checkpointing checkpoints(cfg, opts.resume, trainer, gpt, *train_loader, world, env.rank,
                                groups.dp.size());
      // One run at a time in its directories (run_dir_lock.h): the ones that exist before the
      // checkpoint in them is read; the rest (created) after a bad --resume could be refused.
      lock_run_dirs(world, /*existing_only=*/true);
      const int first_step = checkpoints.restore();
      lock_run_dirs(world, /*existing_only=*/false);
      // before the first checkpoint, not at it (shared_dir_check.h)
      check_every_rank_sees(world, env.rank, "checkpoint.dir", cfg.checkpoint_dir(),
                            std::min(timeout / 2, std::chrono::milliseconds(60000)));
      checkpoints.watch_dir();
      // fp8 states no checkpoint set: the whole weights' scales (a tp slice's amax is not)
      if (gpt.fp8_states_new()) trainer.seed_fp8_weight_scales();
      const int total = cfg.train.steps;
      const int last = cfg.train.last_step();
      if (first_step >= last && !should_rewrite_report(cfg, world, lead, first_step, last))
        return 0;
      if (first_step < last) {
        checkpoints.remove_interrupted_saves(env.rank == 0 && dir_locks.holds_checkpoint_dir());
        checkpoints.check_space(first_step, last);
      }

      // 5. Report skeleton (hardware peak, model size, batch).
      const report::RunContext ctx =
          run_context(cfg, env.world_size, world, *backend, checkpoints, first_step, last);
      const report::RunReport base = report_base(cfg, ctx, data, lead);
      builder.emplace(base, cfg.train.spike_factor, cfg.logging.every_steps);
      builder->set_start_tokens(checkpoints.tokens_after(first_step));
      builder->set_earlier_totals(checkpoints.restored_totals());
      checkpoints.set_totals_source([&] { return builder->totals(); });
      builder->set_data_passes(train_loader->passes_read());
      // The memory as allocated now, for a report of a run that fails before the end (the end
      // replaces it with the peaks of every rank).
      const auto memory_now = [&] { return memory_breakdown(trainer); };
      builder->set_memory({}, memory_now());
      std::unique_ptr<report::MetricsWriter> metrics;
      if (lead) {
        std::filesystem::create_directories(cfg.run.out_dir);
        metrics = std::make_unique<report::MetricsWriter>(cfg.run.out_dir, first_step, ctx.run_id);
        if (!metrics->foreign_run().empty())
          spdlog::warn(
              "{} held another run's steps (run {}; this run is {}): it is started again, and "
              "the report's curve starts at this run's first step",
              metrics->path(), metrics->foreign_run(), ctx.run_id);
        builder->set_earlier(metrics->earlier());
        if (first_step >= last && metrics->earlier().curve.empty())  // a report written again
          spdlog::warn(
              "{} holds no line of the {} steps before the checkpoint: the report written again "
              "has no loss curve, final loss or val loss",
              metrics->path(), first_step);
        log_banner(base, ctx, shape, *train_loader);
        if (first_step < last) {  // (not a requeue that only writes the report again)
          warn_of_repeated_data(base.data, checkpoints.tokens_after(last), last);
          // Until it ends, the report says the run is running: one killed without a word
          // (SIGKILL, a lost node) must not leave an earlier run's "completed" in out_dir.
          report::write_report(builder->finish("running"), cfg.run.out_dir);
        }
      }

      // 6. The loop.
      StepLoop loop(cfg, *backend, trainer, checkpoints, *train_loader, data.val.get(),
                    data.eval_batches, env.rank, env.world_size,
                    StepRecorder{&*builder, metrics.get(), ctx.peak, base.batch.tokens_per_step,
                                 base.model.flops_per_token, memory_now});
      const int done = loop.run(first_step, last, step_running, profile);

      checkpoints.finish();

      // 7. Report: gathered step times and memory of every rank.
      std::vector<double> medians = gather_median_step_times(world, loop.step_times());
      const auto peaks = gather_peak_memory(world, *backend);
      const auto stage_memory = gather_stage_memory(world, mesh, memory_now());
      if (lead) {
        builder->set_rank_median_step_times(std::move(medians));
        builder->set_memory(peaks, memory_now());
        builder->set_stage_memory(stage_memory);
        // Short of train.steps: stopped on purpose (stop_after_steps, a signal), resumable.
        report::RunReport final_report = builder->finish(done < total ? "stopped" : "completed");
        final_report.hardware.kernels = backend->kernels();  // with what ran (cuDNN's calls)
        final_report.throughput.grad_sync_wait_s =
            mean_after(loop.sync_waits(), final_report.throughput.warmup_steps_excluded);
        final_report.profile = profile;
        const std::string path = report::write_report(final_report, cfg.run.out_dir);
        spdlog::info("report: {}", path);
      }
      return 0;
    } catch (const std::exception& e) {
      // Recorded while this rank's communicators are still open (unwinding closes them next):
      // peers that see its sockets close find the reason in the store and name this rank, not
      // the next one to close.
      record_failure(failure_text(e.what(), step_running));
      throw;
    }
  } catch (const std::exception& e) {
    const std::string what = failure_text(e.what(), step_running);
    record_failure(what);
    if (store) store->linger(store_linger(cfg.distributed.timeout_s));
    if (step_running == 0) throw;
    // The step is named in the message; bad input found mid-run (data) still exits 2, and the
    // memory running out is still said as such (app/main.cpp).
    if (dynamic_cast<const config::ConfigError*>(&e)) throw config::ConfigError(what);
    if (dynamic_cast<const std::bad_alloc*>(&e)) throw OutOfMemory(what);
    throw std::runtime_error(what);
  }
}

}  // namespace trainer::train

#include "runtime/train/step_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace trainer::train {
namespace {

report::ProfileInfo log_profile(const PhaseProfiler& profiler, int first_step) {
  report::ProfileInfo profile = report::summarize_profile(profiler, first_step);
  for (const std::string& line : report::profile_table(profile)) spdlog::info("{}", line);
  return profile;
}

}  // namespace

StepLoop::StepLoop(const config::RunConfig& cfg, Backend& backend, TrainStep& trainer,
                   Checkpointing& checkpoints, data::DataLoader& train, data::DataLoader* val,
                   int64_t eval_batches, int rank, int world_size, StepRecorder recorder)
    : cfg_(cfg),
      backend_(backend),
      trainer_(trainer),
      checkpoints_(checkpoints),
      train_(train),
      val_(val),
      eval_batches_(eval_batches),
      world_size_(world_size),
      lead_(rank == 0),
      recorder_(std::move(recorder)),
      faults_(rank) {}

int StepLoop::run(int first_step, int last, int& running,
                  std::optional<report::ProfileInfo>& profile) {
  // logging.profile_steps: the steps [profile_from, profile_to) (0-based) right after warm-up,
  // on rank 0, which reports them
  int profile_from = 0, profile_to = 0;
  if (cfg_.logging.profile_steps > 0 && lead_) {
    profiler_ = std::make_unique<PhaseProfiler>(backend_.make_timer());
    trainer_.set_profiler(profiler_.get());
    profile_from = first_step + report::warmup_steps_to_exclude(
                                    static_cast<size_t>(std::max(0, last - first_step)));
    // (int64_t: profile_steps may be as large as an int goes)
    profile_to = static_cast<int>(
        std::min<int64_t>(last, int64_t{profile_from} + cfg_.logging.profile_steps));
  }
  const BatchSource next_train = [&](int32_t* x, int32_t* y) { train_.next_batch(x, y); };
  bool stop = false;
  int done = first_step;  // the last step finished
  for (int step = first_step; step < last && !stop; ++step) {
    running = step + 1;
    faults_.at_step(step + 1);
    const bool profiled = profiler_ && step >= profile_from && step < profile_to;
    if (profiled) profiler_->begin_step();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t pass_before = train_.state().epoch;
    const StepResult r = trainer_.run(step, next_train);
    if (profiled) profiler_->end_step();  // its wait for the device belongs to this step
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    step_times_.push_back(dt);
    sync_waits_.push_back(r.comm_wait_s);

    report::StepRecord rec{step + 1,  checkpoints_.tokens_after(step + 1),
                           r.loss,    r.grad_norm,
                           r.lr,      dt,
                           r.clipped, r.nonfinite,
                           {},        {}};
    if (cfg_.model.moe.num_experts > 0) {
      rec.moe_aux_loss = r.moe_aux_loss;
      rec.moe_dropped_fraction = r.moe_dropped_fraction;
    }
    stop = checkpoints_.stops_after(step + 1);
    done = step + 1;
    const std::optional<double> val = maybe_evaluate(rec, stop);
    if (profiled && profiler_->steps() > 0 && (step + 1 == profile_to || stop))
      profile = log_profile(*profiler_, profile_from + 1);
    if (lead_) record(rec, r, val, val.has_value() || stop, pass_before, last);
    // After the step's metrics line: a checkpoint never holds a step whose line a kill lost.
    checkpoints_.save_after(step + 1, stop);
    faults_.after_save(step + 1);
  }
  running = 0;
  return done;
}

std::optional<double> StepLoop::maybe_evaluate(const report::StepRecord& rec, bool& stop) {
  // Evals at eval_every and at the schedule's last step, not where stop_after_steps stops early:
  // a stopped and resumed pair evaluates where the uninterrupted run does. Not before a stop
  // signal's checkpoint either: a scheduler's grace period may not wait for a long eval (the
  // resumed run goes on from the next step, without this one's).
  const int total = cfg_.train.steps;
  const int every = cfg_.train.eval_every;
  if (every <= 0 || (rec.step % every != 0 && rec.step != total)) return std::nullopt;
  if (checkpoints_.signalled() && rec.step < total) {
    if (lead_)
      spdlog::info("stop signal: the eval of step {} is skipped to checkpoint now", rec.step);
    return std::nullopt;
  }
  faults_.in_eval(static_cast<int>(rec.step));
  val_->reset();
  const BatchSource next_val = [&](int32_t* x, int32_t* y) { val_->next_batch(x, y); };
  const double val = trainer_.evaluate(eval_batches_, next_val);
  recorder_.builder->record_eval({rec.step, rec.tokens, val});
  // a signal that came during the eval: stop here, not after another step
  if (!stop) stop = checkpoints_.stops_after(static_cast<int>(rec.step));
  return val;
}

// Rank 0's record of a finished step: the report's observations, warnings, the metrics line and
// the progress line (each logging.every_steps, at the first and last steps, and where the step
// evaluated or the run stops: `always`).
void StepLoop::record(const report::StepRecord& rec, const StepResult& r,
                      const std::optional<double>& val, bool always, int64_t pass_before,
                      int last) {
  report::ReportBuilder& builder = *recorder_.builder;
  builder.set_memory({}, recorder_.memory());  // ZeRO's peaks grow in steps
  builder.set_data_passes(train_.passes_read());
  if (auto spike = builder.record_step(rec))
    spdlog::warn("loss spike at step {}: {:.4f} is {:.2f}x the running median", rec.step, rec.loss,
                 spike->ratio);
  if (r.nonfinite) spdlog::warn("step {}: non-finite loss or gradient, update skipped", rec.step);
  if (train_.state().epoch > pass_before)
    spdlog::info("data: step {} starts pass {} over data.train{}", rec.step, pass_before + 2,
                 cfg_.data.shuffle ? ", in a new order" : "");
  if (!always && rec.step % cfg_.logging.every_steps != 0 && rec.step != 1 && rec.step != last)
    return;
  const report::StepRates rates =
      report::step_rates(recorder_.tokens_per_step, rec.step_time_s, recorder_.flops_per_token,
                         recorder_.peak.tflops, world_size_);
  if (rates.mfu > 1 && !warned_mfu_above_peak_) {  // (NaN: the peak is unknown)
    warned_mfu_above_peak_ = true;
    const double reached = rates.mfu * recorder_.peak.tflops;
    spdlog::warn(
        "step {}: MFU {:.0f}%: this step reached {:.3g} TFLOP/s per device, above the peak MFU "
        "divides by, {:.3g} ({}); {}",
        rec.step, 100 * rates.mfu, reached, recorder_.peak.tflops, recorder_.peak.source,
        recorder_.peak.source == "measured-sgemm"
            ? "the sgemm timed at the start ran slower than the run does (the machine was busier "
              "then): set hardware.peak_tflops for MFU against a fixed peak"
            : "hardware.peak_tflops (or the device table) is below what the device does");
  }
  recorder_.metrics->write(rec, rates, val, builder.take_loss_mean());
  spdlog::info("{}", report::progress_line(rec, cfg_.train.steps, rates, val));
}

}  // namespace trainer::train

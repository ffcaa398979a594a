#pragma once
// Checkpointing: the run loop's one handle on checkpoints. restore() starts a run from
// model.init_from or the checkpoint --resume names; save_after() saves every
// checkpoint.every_steps, at train.stop_after_steps, and when SIGTERM/SIGINT reached any rank
// (the group agrees on the stop step with one all-reduce of the flag per step).
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "runtime/ckpt/checkpoint.h"

#include "runtime/config/run_config.h"
#include "runtime/core/run_resume.h"
#include "runtime/core/step_totals.h"
#include "runtime/data/loader.h"
#include "runtime/dist/comm.h"
#include "runtime/model/gpt.h"
#include "runtime/train/host_shard.h"
#include "runtime/train/train_step.h"

namespace trainer::train {

class Checkpointing {
 public:
  Checkpointing(const config::RunConfig& cfg, std::string resume, TrainStep& step,
                model::Gpt& model, data::DataLoader& loader, dist::Comm* world, int rank,
                int dp_size);
  ~Checkpointing();

  // Loads state; returns the number of steps already done (0 for a fresh start).
  int restore();
  // The run's resumes, oldest first, this one's last; empty for a fresh start.
  const std::vector<RunResume>& resumes() const { return resumes_; }
  // The run's identity: drawn at a fresh start, the checkpoint's after a resume (derived from the
  // checkpoint where it has none). Rank 0's is the one saved and reported.
  const std::string& run_id() const { return run_id_; }
  // The restored checkpoint's step totals (none: a fresh start, or a checkpoint without them).
  const std::optional<StepTotals>& restored_totals() const { return restored_totals_; }
  // Each rank notes which directory checkpoint.dir is (device and inode), once it exists and this
  // run holds its lock: every save first checks that it still is (rank 0: the same directory;
  // the others: a directory there). A directory removed or renamed
  // during the run (its lock with it) fails the run at that save, on every rank, rather than
  // recreating it unlocked, where a second run could then save over this run's checkpoints; a
  // save it was removed under fails naming it too.
  void watch_dir();
  // Before the first step, on rank 0: removes the step_N.tmp that interrupted saves left in
  // checkpoint.dir where this run holds its lock (`holds_lock`; else another run's save may be in
  // progress there).
  void remove_interrupted_saves(bool holds_lock);
  // Before the first of steps first_step+1..last, on rank 0 (a refusal is thrown on every rank):
  // refuses a run that saves for certain (certain_saves) when not even one checkpoint fits on
  // checkpoint.dir's filesystem; warns when the later ones may not, or a stop signal's would not.
  void check_space(int first_step, int last) const;
  // Where rank 0's saves take the run's step totals from (the report's builder).
  void set_totals_source(std::function<StepTotals()> source) { totals_source_ = std::move(source); }
  // Tokens trained on after `done` steps: the checkpoint's count, then this run's global batch
  // per step (a resume may change the batch; step * tokens_per_step would then be wrong).
  int64_t tokens_after(int done) const {
    return restored_tokens_ + (done - restored_step_) * tokens_per_step_;
  }
  // After `done` steps: whether the run stops now (a stop signal on any rank, or
  // train.stop_after_steps); commits an async save whose writes every rank has finished.
  bool stops_after(int done);
  bool signalled() const { return signalled_; }  // a stop signal reached a rank (stops_after)
  // After `done` steps, once rank 0 has logged them: saves every checkpoint.every_steps and where
  // the run stops (`stopping`). With checkpoint.async a due save's files are written in the
  // background and committed at the first later step at which every rank's write is done.
  void save_after(int done, bool stopping);
  // At the end of the loop: commits a save still in flight.
  void finish();

 private:
  bool stop_signalled();
  void refuse_later_checkpoints(int first_step) const;
  void refuse_later_checkpoints_agreed(int first_step) const;
  std::optional<config::RunConfig> saved_config(const ckpt::Manifest& m) const;
  void log_config_changes(const std::optional<config::RunConfig>& then) const;
  void refuse_other_train_data(const ckpt::Manifest& m,
                               const std::optional<config::RunConfig>& then,
                               const std::string& step_dir) const;
  struct PendingSave {
    ckpt::SaveRequest req;
    std::future<ckpt::ShardFile> written;
    std::chrono::steady_clock::time_point started;
    double blocked_s = 0;  // how long the training loop waited for this save
  };
  void save(int done, bool async);
  void save_now(int done, bool async);
  // Inside a catch: rethrows the save's error, or where checkpoint.dir changed, one naming it.
  [[noreturn]] void rethrow_save_error(int step) const;
  void commit_pending(bool wait);
  ckpt::SaveRequest save_request(int done, const ckpt::OwnedRuns& owned) const;  // collective
  std::vector<float> model_fp8_scaling() const;  // every stage's layers', every ep rank's experts'
  // After a damaged checkpoint refused under --resume auto: how to resume past it.
  std::string way_past_a_damaged(const std::string& step_dir) const;
  void load(const std::string& step_dir);
  std::string pick_resume_dir();
  std::string agreed_resume_dir();  // rank 0's pick_resume_dir(), seen by every rank

  const config::RunConfig& cfg_;
  std::string resume_;
  TrainStep& step_;
  model::Gpt& model_;
  data::DataLoader& loader_;
  dist::Comm* world_;
  int rank_;
  int dp_size_;
  int64_t tokens_per_step_;
  int restored_step_ = 0;        // the step restore() started from
  int64_t restored_tokens_ = 0;  // and the tokens trained on by then
  int last_saved_ = -1;
  bool signalled_ = false;                  // stops_after saw a stop signal (save_after says so)
  bool resumed_in_checkpoint_dir_ = false;  // from a checkpoint in checkpoint.dir
  std::vector<RunResume> resumes_;          // the run's resumes, this one's last (restore())
  std::string run_id_;
  std::optional<StepTotals> restored_totals_;
  std::function<StepTotals()> totals_source_;
  std::optional<std::pair<uint64_t, uint64_t>> dir_identity_;  // watch_dir()'s
  // Why checkpoint.dir is no longer the watched one, ending with `then`; "" where it still is.
  std::string dir_changed(const std::string& then) const;
  std::unique_ptr<PendingSave> pending_;
  // What saves write from; an async writer reads it until its commit, which precedes the next save.
  std::unique_ptr<HostShard> staging_;
};

}  // namespace trainer::train

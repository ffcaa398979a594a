#include "runtime/train/checkpointing.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/export.h"
#include "runtime/core/sha256.h"
#include "runtime/data/shard_summary.h"
#include "runtime/data/token_source.h"
#include "runtime/train/checkpoint_space.h"
#include "runtime/train/host_shard.h"
#include "runtime/train/rank_agreement.h"
#include "runtime/train/stop_signals.h"

namespace trainer::train {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A directory's (device, inode), none where it is not there.
std::optional<std::pair<uint64_t, uint64_t>> identity_of(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
}

// 16 hex digits from the system's entropy: which run a checkpoint, a report and metrics.jsonl
// belong to, across its resumes.
std::string fresh_run_id() {
  std::random_device entropy;
  const uint64_t id = (uint64_t{entropy()} << 32) ^ entropy();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

}  // namespace

Checkpointing::Checkpointing(const config::RunConfig& cfg, std::string resume, TrainStep& step,
                             model::Gpt& model, data::DataLoader& loader, dist::Comm* world,
                             int rank, int dp_size)
    : cfg_(cfg),
      resume_(std::move(resume)),
      step_(step),
      model_(model),
      loader_(loader),
      world_(world),
      rank_(rank),
      dp_size_(dp_size),
      tokens_per_step_(int64_t{cfg.train.micro_batch} * cfg.train.grad_accum * dp_size *
                       cfg.model.seq_len),
      run_id_(fresh_run_id()) {}

Checkpointing::~Checkpointing() {
  // A write still in flight (the run failed) is waited for but never committed: its step_N.tmp
  // stays incomplete, and resume ignores it.
  if (pending_ && pending_->written.valid()) pending_->written.wait();
}

std::string Checkpointing::pick_resume_dir() {
  if (resume_ == "none") return "";
  if (resume_ != "auto") {
    const auto refuse = [](const std::string& why) {
      return config::ConfigError("--resume " + why +
                                 " (expected auto, none, a checkpoint step directory or a "
                                 "checkpoint.dir)");
    };
    std::error_code ec;
    if (!std::filesystem::is_directory(resume_, ec))
      throw refuse(resume_ + (std::filesystem::exists(resume_, ec) ? ": not a directory"
                                                                   : ": no such directory"));
    std::vector<std::string> skipped;
    std::string step_dir;
    try {
      step_dir = ckpt::resolve_step_dir(resume_, &skipped);
    } catch (const ckpt::CheckpointError& e) {  // a directory, but no checkpoint: bad input
      throw refuse(e.what());
    }
    if (rank_ == 0)
      for (const auto& d : skipped)
        spdlog::warn("checkpoint: ignoring incomplete write {} (no manifest.json committed)", d);
    return step_dir;
  }
  std::vector<std::string> incomplete;
  const auto all = ckpt::list_checkpoints(cfg_.checkpoint_dir(), &incomplete);
  if (rank_ == 0)
    for (const auto& d : incomplete)
      spdlog::warn("checkpoint: ignoring incomplete write {} (no manifest.json committed)", d);
  if (all.empty()) {
    // Only damaged ones (a step directory whose manifest is gone): starting afresh beside them
    // would silently drop the run, so the user decides.
    for (const auto& d : incomplete)
      if (!d.ends_with(".tmp"))
        throw config::ConfigError("--resume auto: " + d +
                                  " has no manifest.json (an incomplete or damaged checkpoint), "
                                  "and checkpoint.dir holds no complete one: move it away to "
                                  "start afresh, or pass --resume none");
    return "";
  }
  if (rank_ == 0)  // older bad ones are reported; the newest one must be good (checked on load)
    for (size_t i = 1; i < all.size(); ++i) try {
        ckpt::read_manifest(all[i]);
      } catch (const std::exception& e) {
        spdlog::warn("checkpoint: skipping {}: {}", all[i], e.what());
      }
  return all.front();
}

// The config the checkpoint's run had (written since 2026-12-03); none for an older checkpoint, or
// one this version cannot parse (rank 0 says so).
std::optional<config::RunConfig> Checkpointing::saved_config(const ckpt::Manifest& m) const {
  if (m.config_yaml.empty()) return std::nullopt;
  try {
    return config::parse_config(m.config_yaml);
  } catch (const std::exception& e) {
    if (rank_ == 0)
      spdlog::warn("checkpoint: cannot compare its config with this run's: {}", e.what());
    return std::nullopt;
  }
}

// Names the settings this run changes from the checkpoint's run (a new lr is often meant; a new
// data source or seed silently reinterprets the saved loader position).
void Checkpointing::log_config_changes(const std::optional<config::RunConfig>& then) const {
  if (!then) return;
  const std::vector<std::string> changes = config::config_changes(*then, cfg_);
  if (changes.empty()) return;
  std::string text;
  for (const std::string& c : changes) text += (text.empty() ? "" : "; ") + c;
  spdlog::warn("resuming with {} setting(s) changed since the checkpoint: {}", changes.size(),
               text);
}

// Refuses to start at `first_step` when checkpoint.dir holds later checkpoints (of an earlier
// run: a fresh start with --resume none, or a rewind to an older step). This run's checkpoints
// would be mixed with them: retention, which keeps the highest steps, would delete the ones it
// just saved, and --resume auto would continue the abandoned run.
void Checkpointing::refuse_later_checkpoints(int first_step) const {
  std::string later;
  for (const std::string& dir : ckpt::list_checkpoints(cfg_.checkpoint_dir())) {
    const int64_t step = ckpt::step_of_dir_name(std::filesystem::path(dir).filename().string());
    if (step > first_step)
      later = std::filesystem::path(dir).filename().string() + (later.empty() ? "" : ", " + later);
  }
  if (later.empty()) return;
  throw config::ConfigError(
      "checkpoint.dir = " + cfg_.checkpoint_dir() + " holds " + later +
      " of an earlier run, past step " + std::to_string(first_step) +
      " where this run starts (--resume " + resume_ +
      "); its checkpoints would be mixed with them (retention keeps the highest steps, --resume "
      "auto takes the highest). Move those away, or set checkpoint.dir to another directory");
}

std::string Checkpointing::agreed_resume_dir() {
  // Rank 0's view of checkpoint.dir decides for every rank. A rank that listed it on its own
  // could find another newest checkpoint (a network filesystem's cached listing just after a
  // commit; a relative checkpoint.dir from another working directory) and start from other
  // weights, moments and data position than its peers, with nothing to say so.
  const std::string dir = rank0_decides(world_, rank_, [&] { return pick_resume_dir(); });
  std::error_code ec;
  const bool unseen = !dir.empty() && !std::filesystem::exists(
                                          std::filesystem::path(dir) / ckpt::kManifestName, ec);
  const auto [blind, _] = first_rank_saying(world_, rank_, unseen ? dir : std::string());
  if (blind >= 0)
    throw config::ConfigError(
        "checkpoint.dir = " + cfg_.checkpoint_dir() + ": rank " + std::to_string(blind) +
        " does not see " + dir +
        ", the checkpoint rank 0 resumes from: every rank must see the same checkpoint.dir (a "
        "filesystem all nodes share; a relative path is taken from each process's working "
        "directory)");
  return dir;
}

// The checkpoint's loader position over other train shards than it was saved reading
// (data/shard_summary.h) would resume on other tokens: refused on every rank, each with its own
// view of data.train (node-local copies are fine).
void Checkpointing::refuse_other_train_data(const ckpt::Manifest& m,
                                            const std::optional<config::RunConfig>& then,
                                            const std::string& step_dir) const {
  // What the checkpoint read: recorded since 2026-12-07; before, its config says.
  std::optional<bool> shuffled_then = m.loader_shuffle, synthetic_then;
  if (m.loader_shuffle) {
    synthetic_then = m.loader_shards.empty();
  } else if (then) {
    shuffled_then = then->data.shuffle;
    synthetic_then = data::is_synthetic_spec(then->data.train);
  }
  const auto [rank, difference] = first_rank_saying(
      world_, rank_,
      data::shard_list_difference(m.loader_shards, data::shard_summaries(loader_), m.loader,
                                  cfg_.data.shuffle, shuffled_then, synthetic_then));
  if (rank < 0) return;
  const std::string position = data::describe_position(m.loader);
  const std::string way =
      difference.starts_with("data.shuffle")
          ? "Set data.shuffle as it was saved with"
          : "Give data.train the data it was saved with (file names and token counts are "
            "compared, not directories; without data.shuffle, shards added after the one it was "
            "reading are read later), or start a new run on the new data";
  throw config::ConfigError("config: data.train = \"" + cfg_.data.train + "\" is not the data " +
                            step_dir + " was saved reading: rank " + std::to_string(rank) +
                            " sees " + difference + ". Its position (" + position +
                            ") would read other tokens. " + way);
}

// refuse_later_checkpoints as rank 0 sees checkpoint.dir, on every rank.
void Checkpointing::refuse_later_checkpoints_agreed(int first_step) const {
  rank0_decides(world_, rank_, [&] {
    refuse_later_checkpoints(first_step);
    return std::string();
  });
}

int Checkpointing::restore() {
  const std::string dir = agreed_resume_dir();
  if (!dir.empty()) {
    load(dir);
    std::error_code ec;  // (rank 0's answer on every rank: whether to save is a collective)
    resumed_in_checkpoint_dir_ = any_rank(
        world_, rank_ == 0 && std::filesystem::equivalent(std::filesystem::path(dir).parent_path(),
                                                          cfg_.checkpoint_dir(), ec));
    refuse_later_checkpoints_agreed(last_saved_);
    return last_saved_;
  }
  refuse_later_checkpoints_agreed(0);
  if (!cfg_.model.init_from.empty()) {
    ckpt::GlobalWeights w;
    try {
      w = ckpt::read_weight_file(cfg_.model.init_from, model::GptDims::from_config(cfg_.model));
    } catch (const std::exception& e) {  // the file the user named is bad input
      throw config::ConfigError("config: model.init_from = \"" + cfg_.model.init_from +
                                "\": " + e.what());
    }
    HostShard host(step_.backend(), step_.owned_state());
    for (const ckpt::OwnedShard& run : host.shard())
      ckpt::fill_owned_params(model_.layout(), w, run);
    host.push();
    step_.sync_params_from_owners();
    if (rank_ == 0) spdlog::info("weights from {}", cfg_.model.init_from);
  }
  return 0;
}

std::string Checkpointing::way_past_a_damaged(const std::string& step_dir) const {
  if (resume_ != "auto") return "";
  const auto all = ckpt::list_checkpoints(cfg_.checkpoint_dir());
  if (all.empty() || all[0] != step_dir) return "";
  // The newest older one whose files are there at their sizes (a damaged one before it is named
  // too: moving only the newest would have the next resume refuse that one).
  std::string damaged = step_dir;
  for (size_t i = 1; i < all.size(); ++i) {
    if (ckpt::files_look_complete(all[i]))
      return "; to resume from an earlier checkpoint (its files are there at their sizes), move " +
             damaged + " out of checkpoint.dir (--resume auto then takes " + all[i] + ")";
    damaged += " and " + all[i];
  }
  return "; checkpoint.dir holds no other complete checkpoint: move it away and pass --resume "
         "none to start afresh";
}

void Checkpointing::load(const std::string& step_dir) {
  // Rank 0 checks every file's checksum and the model shape; the others follow its verdict.
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  bool model_differs = false;
  if (rank_ == 0) try {
      const ckpt::Manifest m = ckpt::verify_checkpoint(step_dir);
      const std::string diff =
          ckpt::model_difference(m.model, model::GptDims::from_config(cfg_.model));
      model_differs = !diff.empty();
      if (model_differs) error = "the model shape differs: " + diff;
    } catch (const std::exception& e) {
      error = e.what();
    }
  if (any_rank(world_, !error.empty())) {
    const std::string what =
        "checkpoint " + step_dir + " refused: " + (error.empty() ? "see rank 0" : error);
    // A config that asks for another model is bad input (exit 2, as model.init_from's); a
    // damaged checkpoint is not.
    if (any_rank(world_, model_differs)) throw config::ConfigError("config: " + what);
    throw ckpt::CheckpointError(what + way_past_a_damaged(step_dir));
  }
  const auto t1 = std::chrono::steady_clock::now();
  ckpt::CheckpointReader reader(step_dir);
  const ckpt::Manifest& m = reader.manifest();
  // the settings changed since, first: they explain a loader position that no longer fits; and
  // before the weights are read, which takes minutes at scale
  const std::optional<config::RunConfig> then = saved_config(m);
  if (rank_ == 0) log_config_changes(then);
  refuse_other_train_data(m, then, step_dir);
  HostShard host(step_.backend(), step_.owned_state());
  reader.read_owned(model_.layout(), host.shard());
  host.push();
  step_.set_adam_step(m.adam_step);
  step_.sync_params_from_owners();
  if (model_.compute_fp8() && !model_.set_fp8_scaling_state(m.fp8_scaling) && rank_ == 0)
    spdlog::warn(
        "checkpoint {} has no fp8 scaling state for this model: the weights' scales start "
        "from their amaxes, the inputs' at 1",
        step_dir);
  loader_.restore(m.loader, m.loader_global_batch_tokens);
  resumes_ = m.resumes;
  // An older checkpoint has none: one derived from it, the same for every process that resumes
  // it (a requeue's must match the report its killed predecessor wrote).
  run_id_ = !m.run_id.empty() ? m.run_id
                              : sha256_hex(m.config_sha256 + " " + std::to_string(m.seed) + " " +
                                           std::to_string(m.step))
                                    .substr(0, 16);
  restored_totals_ = m.step_totals;
  RunResume& resume = resumes_.emplace_back(RunResume{m.step, world_ ? world_->size() : 1, {}});
  if (then) resume.changes = config::training_changes(*then, cfg_);
  // (against the world that trained, not a grid `ckpt reshard` wrote)
  if (m.world_that_trained() != resume.world_size)
    resume.changes.push_back("world: " + std::to_string(m.world_that_trained()) + " -> " +
                             std::to_string(resume.world_size));
  last_saved_ = static_cast<int>(m.step);
  restored_step_ = last_saved_;
  restored_tokens_ = m.tokens;
  if (rank_ == 0 && m.step > 0 && m.tokens != m.step * tokens_per_step_)
    spdlog::info(
        "{} tokens in the checkpoint's {} steps; {} tokens per step from here on (the global "
        "batch differs from the one the steps so far used)",
        m.tokens, m.step, tokens_per_step_);
  const auto t2 = std::chrono::steady_clock::now();
  if (rank_ == 0)
    spdlog::info(
        "resumed from {} (step {}, {} tokens, saved by {}; verify {:.3f} s, read {:.3f} s)",
        step_dir, m.step, m.tokens, m.grid.describe(),
        std::chrono::duration<double>(t1 - t0).count(),
        std::chrono::duration<double>(t2 - t1).count());
}

bool Checkpointing::stop_signalled() {
  return any_rank(world_, StopSignals::received());
}

bool Checkpointing::stops_after(int done) {
  commit_pending(/*wait=*/false);
  signalled_ = stop_signalled();
  return signalled_ || (cfg_.train.stop_after_steps > 0 && done >= cfg_.train.stop_after_steps);
}

void Checkpointing::save_after(int done, bool stopping) {
  // The last step too where the run saves at all (as Megatron saves at the end of training), or
  // where it resumed from a checkpoint in checkpoint.dir (one a stop saved): a re-run (a requeue
  // of a finished job) must find the run finished, not train its last steps again from an older
  // checkpoint over its metrics.
  const int every = cfg_.checkpoint.every_steps;
  const bool last = done == cfg_.train.steps && (every > 0 || resumed_in_checkpoint_dir_);
  const bool due = last || (every > 0 && done % every == 0);
  if (stopping)
    save(done, /*async=*/false);  // the run ends here: nothing to overlap the write with
  else if (due)
    save(done, cfg_.checkpoint.async);
  if (signalled_ && rank_ == 0 && done < cfg_.train.steps)
    spdlog::info("stop signal: stopped after step {}", done);
}

void Checkpointing::finish() {
  commit_pending(/*wait=*/true);
}

std::vector<float> Checkpointing::model_fp8_scaling() const {
  std::vector<float> states = model_.fp8_scaling_state();  // empty unless fp8 compute
  // Each pipeline stage fills its own layers, each ep rank its own experts (the floats of the
  // others are 0, and no state is negative): the max over the ranks is the model's. (Every rank
  // calls save at the same step; a few KiB.)
  if (!states.empty() && world_ != nullptr && world_->size() > 1)
    world_->all_reduce(states.data(), states.size(), dist::CommDType::f32, dist::ReduceOp::max);
  return states;
}

ckpt::SaveRequest Checkpointing::save_request(int done, const ckpt::OwnedRuns& owned) const {
  ckpt::SaveRequest req;
  req.root = cfg_.checkpoint_dir();
  req.layout = &model_.layout();
  req.owned = owned;
  req.rank = rank_;
  req.world = world_;
  req.keep = cfg_.checkpoint.keep;
  ckpt::Manifest& m = req.manifest;
  m.step = done;
  m.tokens = tokens_after(done);
  m.adam_step = step_.adam_step();
  m.seed = cfg_.run.seed;
  m.config_sha256 = config::config_sha256(cfg_);
  m.config_yaml = config::to_yaml(cfg_);
  m.model = model::GptDims::from_config(cfg_.model);
  m.grid = {world_ ? world_->size() : 1,
            dp_size_,
            cfg_.parallel.tp,
            cfg_.parallel.pp,
            cfg_.parallel.cp,
            cfg_.parallel.zero,
            cfg_.parallel.ep};
  m.loader = loader_.state();
  m.loader_global_batch_tokens = loader_.tokens_per_sample();
  m.loader_shards = data::shard_summaries(loader_);
  m.resumes = resumes_;
  m.run_id = run_id_;
  if (rank_ == 0 && totals_source_) m.step_totals = totals_source_();
  m.loader_shuffle = cfg_.data.shuffle;
  std::vector<float> fp8_scaling = model_fp8_scaling();
  if (rank_ == 0) m.fp8_scaling = std::move(fp8_scaling);
  return req;
}

void Checkpointing::watch_dir() {
  dir_identity_ = identity_of(cfg_.checkpoint_dir());
}

std::string Checkpointing::dir_changed(const std::string& then) const {
  if (!dir_identity_) return "";
  // Rank 0 holds the lock's open file there, which keeps an automounted filesystem mounted: its
  // (device, inode) is the directory's. Another rank's device may change with a remount between
  // saves, so it only tells a directory that is not there.
  const auto now = identity_of(cfg_.checkpoint_dir());
  if (rank_ == 0 ? now == dir_identity_ : now.has_value()) return "";
  return "checkpoint.dir = \"" + cfg_.checkpoint_dir() +
         "\" was removed or replaced during the run (it is no longer the directory this run "
         "locked at its start: removed, renamed, or a symlink pointed elsewhere; the checkpoints "
         "saved before are not in it): " +
         then;
}

void Checkpointing::remove_interrupted_saves(bool holds_lock) {
  rank0_decides(world_, rank_, [&] {
    std::vector<std::string> incomplete;
    ckpt::list_checkpoints(cfg_.checkpoint_dir(), &incomplete);
    for (const std::string& dir : incomplete) {
      if (!dir.ends_with(".tmp")) continue;
      if (!holds_lock) {  // (another run's save may be in progress there)
        spdlog::info(
            "checkpoint.dir: {} left in place: without a lock (the filesystem has none) "
            "it may be another run's save in progress",
            dir);
        continue;
      }
      std::error_code ec;
      const auto removed = std::filesystem::remove_all(dir, ec);
      if (ec)
        spdlog::warn("checkpoint.dir: cannot remove the interrupted save {}: {}", dir,
                     ec.message());
      else
        spdlog::info("checkpoint.dir: removed an interrupted save, {} ({} entries)", dir, removed);
    }
    return std::string();
  });
}

void Checkpointing::check_space(int first_step, int last) const {
  rank0_decides(world_, rank_, [&] {
    const std::string root = cfg_.checkpoint_dir();
    const size_t existing = ckpt::list_checkpoints(root).size();
    const int saves = certain_saves(cfg_, first_step, last, resumed_in_checkpoint_dir_);
    const int64_t one = checkpoint_bytes(cfg_, world_ ? world_->size() : 1);
    const int64_t needed =
        checkpoint_space_needed(one, cfg_.checkpoint.keep, static_cast<int>(existing), saves);
    const std::optional<int64_t> free = free_bytes(root);
    if (saves > 0)
      spdlog::info("checkpoints: about {} each, saves to come: {}, keep {}; {} free in {}",
                   bytes_text(one), saves, cfg_.checkpoint.keep,
                   free ? bytes_text(*free) : std::string("unknown space"), root);
    if (!free) return std::string();
    const SpaceVerdict verdict = judge_checkpoint_space(cfg_, *free, one, needed, saves);
    if (!verdict.error.empty()) throw config::ConfigError(verdict.error, "checkpoint.dir");
    if (!verdict.warning.empty()) spdlog::warn("{}", verdict.warning);
    return std::string();
  });
}

void Checkpointing::rethrow_save_error(int step) const {
  try {
    throw;
  } catch (const std::exception& e) {
    // A directory removed while a save writes into it fails the write with ENOENT: say why.
    const std::string why =
        dir_changed("the save of step " + std::to_string(step) + " failed (" + e.what() + ")");
    if (!why.empty()) throw ckpt::CheckpointError(why);
    throw;
  }
}

void Checkpointing::save(int done, bool async) {
  if (done == last_saved_) return;
  commit_pending(/*wait=*/true);  // one save in flight at most (its failure names the dir)
  const std::string changed = dir_changed(
      "stopped before saving again, so that no other run's checkpoints mix with this "
      "one's");
  if (const auto [rank, why] = first_rank_saying(world_, rank_, changed); rank >= 0)
    throw ckpt::CheckpointError(why);
  try {
    save_now(done, async);
  } catch (...) {
    rethrow_save_error(done);
  }
}

void Checkpointing::save_now(int done, bool async) {
  const auto t0 = std::chrono::steady_clock::now();
  // An asynchronous save always writes from a host copy: training changes the weights meanwhile.
  // The copy's buffers are kept from one save to the next (no fresh page faults per save).
  const bool device = step_.backend().device() != DeviceType::cpu;
  const OwnedState owned = step_.owned_state();
  const bool copy = async || device;
  if (!staging_ || !staging_->holds(owned, copy))
    staging_ = std::make_unique<HostShard>(step_.backend(), owned, copy);
  staging_->pull();
  ckpt::SaveRequest req = save_request(done, staging_->shard());
  last_saved_ = done;
  if (!async) {
    const std::string dir = ckpt::save_checkpoint(req);
    const double dt = seconds_since(t0);
    if (rank_ == 0) spdlog::info("checkpoint saved: {} ({:.3f} s)", dir, dt);
    return;
  }
  const std::string tmp_dir = ckpt::prepare_save(req);
  pending_ = std::make_unique<PendingSave>();
  pending_->blocked_s = seconds_since(t0);  // the copy and the tmp dir; the rest overlaps training
  pending_->started = t0;
  pending_->req = req;
  pending_->written = std::async(std::launch::async, [tmp_dir, req] {
    ckpt::test_delay(req.rank, /*before_write=*/true);
    ckpt::ShardFile f =
        ckpt::write_shard_file(tmp_dir, req.rank, *req.layout, req.owned, req.manifest);
    ckpt::test_delay(req.rank, /*before_write=*/false);
    return f;
  });
}

void Checkpointing::commit_pending(bool wait) {
  if (!pending_) return;
  // Every rank must enter the commit (a collective) at the same step: unless told to wait, the
  // group commits once all of its background writes are done.
  const bool mine_done =
      pending_->written.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  if (!wait && any_rank(world_, !mine_done)) return;
  const int step = pending_->req.manifest.step;
  ckpt::ShardFile mine;
  std::string dir;
  try {
    try {
      mine = pending_->written.get();  // rethrows the writer's error
    } catch (const std::exception& e) {
      // (the failure is reported at the step running now: name the checkpoint's own step)
      throw std::runtime_error("the async checkpoint of step " + std::to_string(step) + ": " +
                               e.what());
    }
    dir = ckpt::finish_save(pending_->req, mine);
  } catch (...) {
    rethrow_save_error(step);
  }
  if (rank_ == 0)
    spdlog::info(
        "checkpoint saved: {} (async: training blocked {:.3f} s, committed after {:.3f} s)", dir,
        pending_->blocked_s, seconds_since(pending_->started));
  pending_.reset();
}

}  // namespace trainer::train

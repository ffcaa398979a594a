#pragma once
// Sharded checkpoints: <root>/step_00000100/{manifest.json, rank_00000.safetensors, ...}.
// Every rank writes only what it owns; rank 0 writes the manifest last, after all ranks reported
// their file's sha256, and renames step_N.tmp into place. A directory is complete iff it has no
// ".tmp" suffix (the rename is the commit point).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/ckpt/manifest.h"
#include "runtime/ckpt/owned_shard.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/dist/comm.h"

namespace trainer::ckpt {

struct SaveRequest {
  std::string root;   // checkpoint.dir
  Manifest manifest;  // everything but shards (filled in by save_checkpoint)
  const model::ParamLayout* layout = nullptr;
  OwnedRuns owned;
  int rank = 0;
  dist::Comm* world = nullptr;  // null: a single process
  int keep = 2;                 // newest complete checkpoints kept; <= 0 keeps all
};

// Collective over `world`. Returns the step directory (on every rank).
std::string save_checkpoint(const SaveRequest& req);

// save_checkpoint in two collective halves, so that the file writes between them can run on a
// background thread (asynchronous save): prepare_save() makes a fresh step_N.tmp and returns it;
// each rank then writes its own file with write_shard_file() (no communication); finish_save()
// gathers every rank's file hash and rank 0 commits. Returns the step directory.
std::string prepare_save(const SaveRequest& req);
std::string finish_save(const SaveRequest& req, const ShardFile& mine);
// Test hook, TRAINER_TEST_CKPT_DELAY_S=SECONDS[,before_write][,rank=R]: this rank (every rank
// without rank=) sleeps between its shard write and the commit (crash-safety tests), or with
// before_write between the save's start and its write (an async write that read the live weights
// instead of their copy would then write later steps' values). Call at both points.
void test_delay(int rank, bool before_write);

// The steps of save_checkpoint, for writers that hold every rank's state (reshard):
// begin (a fresh step_N.tmp in `root`, which must exist), one file per rank, commit (manifest,
// rename, prune old ones).
std::string begin_checkpoint(const std::string& root, int64_t step);  // returns the tmp dir
ShardFile write_shard_file(const std::string& tmp_dir, int rank, const model::ParamLayout& layout,
                           const OwnedRuns& owned, const Manifest& manifest);
std::string commit_checkpoint(const std::string& root, Manifest m, const model::ParamLayout& layout,
                              std::vector<ShardFile> shards, int keep);

std::string step_dir_name(int64_t step);
// "768x2304": a tensor shape in messages and listings.
std::string shape_text(const std::vector<int64_t>& shape);
// The step of a name step_dir_name() made ("step_00000100" -> 100), -1 for any other name.
int64_t step_of_dir_name(const std::string& name);
// Complete step directories under root, newest first; `incomplete` gets the *.tmp ones and those
// without a manifest.json, newest first too.
std::vector<std::string> list_checkpoints(const std::string& root,
                                          std::vector<std::string>* incomplete = nullptr);
// A step dir, or the newest complete one under a root; throws when there is none. A root's
// incomplete step directories newer than the one returned go to skipped_newer.
std::string resolve_step_dir(const std::string& path,
                             std::vector<std::string>* skipped_newer = nullptr);

// Reads the manifest and checks every file's size and sha256 (throws CheckpointError).
Manifest verify_checkpoint(const std::string& step_dir);
// A quick look short of verify_checkpoint's checksums: the manifest reads and every rank's file is
// there at the size it lists (what a refusal checks before it points at a fallback checkpoint).
bool files_look_complete(const std::string& step_dir);

// Reads any global elements of any saved tensor, whatever grid wrote them.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string step_dir);  // manifest only; no checksums
  const Manifest& manifest() const { return manifest_; }
  const std::vector<int64_t>& global_shape(const std::string& tensor) const;
  // Elements [first, first + count) of the flattened global tensor of `kind` (param, m, v).
  void read_global(const std::string& kind, const std::string& tensor, int64_t first, int64_t count,
                   float* out);
  // Fills an owned shard of `layout`, of any tp slice, whatever grid saved the checkpoint.
  void read_owned(const model::ParamLayout& layout, const OwnedShard& owned);
  void read_owned(const model::ParamLayout& layout, const OwnedRuns& owned) {
    for (const OwnedShard& run : owned) read_owned(layout, run);
  }

 private:
  SafetensorsReader& file(size_t shard);
  std::string dir_;
  Manifest manifest_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
};

}  // namespace trainer::ckpt

#pragma once
// Whether checkpoint.dir's filesystem has room for the run's checkpoints, decided before the
// first step: a full disk found at the first save would cost the steps trained before it.
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::train {

// The bytes one checkpoint of this model takes on a grid of `world` ranks: every parameter's fp32
// master weight and AdamW's two fp32 moments (12 bytes a parameter of the padded model, however
// ZeRO and the grid split them over the ranks' files), and an allowance for the safetensors
// headers and manifest.json (per tensor and rank) and each file's last block.
int64_t checkpoint_bytes(const config::RunConfig& cfg, int world);

// The saves a run of steps first_step+1..last makes for certain: every checkpoint.every_steps,
// and at `last` where train.stop_after_steps stops it there, or where it is train.steps and the
// run saves periodically or resumed from a checkpoint in checkpoint.dir (Checkpointing::
// save_after). A stop signal's are not counted.
int certain_saves(const config::RunConfig& cfg, int first_step, int last,
                  bool resumed_in_checkpoint_dir);

// The space the run's saves may need on top of what is free now: with checkpoint.keep = K, at
// most K + 1 checkpoints are on disk (a save commits before it prunes), `existing` of them there
// already, and no more than the saves left write. At least one checkpoint.
int64_t checkpoint_space_needed(int64_t one_checkpoint, int keep, int existing, int saves_left);

struct SpaceVerdict {
  std::string error;    // a save is certain, and not even one checkpoint fits
  std::string warning;  // the first fits, the later ones may not; or only a stop signal saves
};
SpaceVerdict judge_checkpoint_space(const config::RunConfig& cfg, int64_t free_bytes,
                                    int64_t one_checkpoint, int64_t needed, int saves_left);

// The bytes this process may still write on `dir`'s filesystem (the blocks reserved for root
// count where it is root); none where statvfs fails or the filesystem states no size (some FUSE
// mounts). TRAINER_TEST_FREE_BYTES stands in for it in tests.
std::optional<int64_t> free_bytes(const std::string& dir);

// "1.36 MiB", "3.20 GiB" (binary units, as compare and df -h).
std::string bytes_text(int64_t bytes);

}  // namespace trainer::train

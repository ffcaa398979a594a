#pragma once
// Whether checkpoint.dir's filesystem has room for the run's checkpoints, decided before the
// first step: a full disk found at the first save would cost the steps trained before it.
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::train {

// The bytes one checkpoint of this model takes: every parameter's fp32 master weight and AdamW's
// two fp32 moments (12 bytes a parameter, however ZeRO and the grid split them over the ranks'
// files); the safetensors headers and manifest.json add a few KB.
int64_t checkpoint_bytes(const config::RunConfig& cfg);

// The space the run's saves may need on top of what is free now: with checkpoint.keep = K, at
// most K + 1 checkpoints are on disk (a save commits before it prunes), `existing` of them there
// already, and no more than the saves left write. At least one checkpoint.
int64_t checkpoint_space_needed(int64_t one_checkpoint, int keep, int existing, int saves_left);

struct SpaceVerdict {
  std::string error;    // not even one checkpoint fits, and the run saves (checkpoint.every_steps)
  std::string warning;  // the first fits, the later ones may not
};
SpaceVerdict judge_checkpoint_space(const config::RunConfig& cfg, int64_t free_bytes,
                                    int64_t one_checkpoint, int64_t needed);

// Free bytes for an unprivileged writer on `dir`'s filesystem; none where statvfs fails
// (TRAINER_TEST_FREE_BYTES stands in for it in tests).
std::optional<int64_t> free_bytes(const std::string& dir);

// "1.36 MiB", "3.20 GiB" (binary units, as compare and df -h).
std::string bytes_text(int64_t bytes);

}  // namespace trainer::train

#include "runtime/train/checkpoint_space.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "runtime/model/gpt_shape.h"
#include "runtime/model/param_layout.h"

namespace trainer::train {

int64_t checkpoint_bytes(const config::RunConfig& cfg, int world) {
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  const model::ParamLayout whole(dims, model::GptShard::whole(dims));
  const int64_t tensors = static_cast<int64_t>(whole.params().size());
  const int64_t data = whole.total_numel() * 3 * int64_t{sizeof(float)};
  // Header entries for each tensor piece's three states, manifest entries for each tensor and
  // piece: measured some 550 bytes a tensor or rank in all (18 KB for 2 layers on 2 ranks, 81 KB
  // for 12); 1 KiB bounds it. And up to a 4 KiB block unused at the end of each file.
  const int64_t metadata = 1024 * (tensors + world) + 16 * 1024;
  return data + metadata + 4096 * (world + 1);
}

int certain_saves(const config::RunConfig& cfg, int first_step, int last,
                  bool resumed_in_checkpoint_dir) {
  const int every = cfg.checkpoint.every_steps;
  const int periodic = every > 0 ? last / every - first_step / every : 0;
  // (a train.stop_after_steps past train.steps stops nothing)
  const bool at_last = (cfg.train.stop_after_steps > 0 && last == cfg.train.stop_after_steps) ||
                       (last == cfg.train.steps && (every > 0 || resumed_in_checkpoint_dir));
  const bool counted = every > 0 && last % every == 0;
  return periodic + (at_last && !counted && last > first_step ? 1 : 0);
}

int64_t checkpoint_space_needed(int64_t one_checkpoint, int keep, int existing, int saves_left) {
  const int64_t more = std::min(int64_t{keep} + 1 - existing, int64_t{saves_left});
  return std::max<int64_t>(more, 1) * one_checkpoint;
}

SpaceVerdict judge_checkpoint_space(const config::RunConfig& cfg, int64_t free_bytes,
                                    int64_t one_checkpoint, int64_t needed, int saves_left) {
  SpaceVerdict v;
  const std::string where = "checkpoint.dir = \"" + cfg.checkpoint_dir() +
                            "\": " + bytes_text(free_bytes) + " free on its filesystem";
  const std::string one = "one checkpoint of this model takes about " + bytes_text(one_checkpoint) +
                          " (fp32 weights and AdamW's two moments, 12 bytes a parameter)";
  if (free_bytes < one_checkpoint) {
    if (saves_left > 0)
      v.error = where + ", and " + one + ", and the run saves " + std::to_string(saves_left) +
                (saves_left == 1 ? " time" : " times") +
                ": free some space or point checkpoint.dir at a larger filesystem";
    else
      v.warning = where + ", and " + one + ": a save at a stop signal would fail";
  } else if (free_bytes < needed) {
    v.warning = where + "; " + one + ", and " + std::to_string(saves_left) +
                " saves with checkpoint.keep = " + std::to_string(cfg.checkpoint.keep) +
                " need about " + bytes_text(needed) +
                " before the run ends: a later save may fail for want of space";
  }
  return v;
}

std::optional<int64_t> free_bytes(const std::string& dir) {
  // Tests stand in a small filesystem this way (mounting one needs privileges CI may not have).
  if (const char* stand_in = std::getenv("TRAINER_TEST_FREE_BYTES"))
    return std::strtoll(stand_in, nullptr, 10);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0 || st.f_blocks == 0) return std::nullopt;
  const auto blocks = ::geteuid() == 0 ? st.f_bfree : st.f_bavail;
  return static_cast<int64_t>(blocks) * static_cast<int64_t>(st.f_frsize);
}

std::string bytes_text(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[unit]);
  return text;
}

}  // namespace trainer::train

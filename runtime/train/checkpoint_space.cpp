#include "runtime/train/checkpoint_space.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "runtime/report/flops.h"
#include "runtime/report/report_from_config.h"

namespace trainer::train {

int64_t checkpoint_bytes(const config::RunConfig& cfg) {
  const report::ParamCounts params = report::count_params(report::model_dims(cfg.model));
  return params.total * 3 * int64_t{sizeof(float)};
}

int64_t checkpoint_space_needed(int64_t one_checkpoint, int keep, int existing, int saves_left) {
  const int64_t more = std::min(keep + 1 - existing, saves_left);
  return std::max<int64_t>(more, 1) * one_checkpoint;
}

SpaceVerdict judge_checkpoint_space(const config::RunConfig& cfg, int64_t free_bytes,
                                    int64_t one_checkpoint, int64_t needed) {
  SpaceVerdict v;
  const std::string where = "checkpoint.dir = \"" + cfg.checkpoint_dir() +
                            "\": " + bytes_text(free_bytes) + " free on its filesystem";
  const std::string one = "one checkpoint of this model takes about " + bytes_text(one_checkpoint) +
                          " (fp32 weights and AdamW's two moments, 12 bytes a parameter)";
  if (free_bytes < one_checkpoint) {
    if (cfg.checkpoint.every_steps > 0)
      v.error = where + ", and " + one +
                ": free some space or point checkpoint.dir at a larger filesystem (or set "
                "checkpoint.every_steps = 0 to train without checkpoints)";
    else
      v.warning = where + ", and " + one + ": a save at a stop signal would fail";
  } else if (free_bytes < needed) {
    v.warning = where + "; " + one +
                ", and checkpoint.keep = " + std::to_string(cfg.checkpoint.keep) +
                " with checkpoint.every_steps = " + std::to_string(cfg.checkpoint.every_steps) +
                " needs about " + bytes_text(needed) +
                " more before the run ends: a later save may fail for want of space";
  }
  return v;
}

std::optional<int64_t> free_bytes(const std::string& dir) {
  // Tests stand in a small filesystem this way (mounting one needs privileges CI may not have).
  if (const char* stand_in = std::getenv("TRAINER_TEST_FREE_BYTES"))
    return std::strtoll(stand_in, nullptr, 10);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return std::nullopt;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
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

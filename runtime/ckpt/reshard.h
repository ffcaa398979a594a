#pragma once
// Offline resharding: rewrite a checkpoint for another grid (dp, tp, pp, cp, ep and zero stage).
// Online loads do not need it (each rank reads the global elements it owns); it makes a checkpoint
// whose files match the new grid one to one.
#include <string>
#include <utility>
#include <vector>

#include "runtime/ckpt/manifest.h"

namespace trainer::ckpt {

// "dp=4,tp=2,zero=1" -> Grid (keys dp, zero, tp, pp, cp, ep); a key left out keeps its value in
// `from` (the source checkpoint's grid).
Grid parse_grid(const std::string& spec, const Grid& from = Grid{});
// Elements [begin, end) of `total` (one tp slice's buffer) owned by replica r (the dp x cp
// group's rank, dp index * cp + cp index): all on replica 0 for zero 0 (on replicas 0 .. ep - 1
// under expert parallelism), else cut over the dp * cp replicas as the runtime cuts it
// (parallel::ZeroShards: equal chunks, the remainder on the last). (With ZeRO under expert
// parallelism a replica owns a run of each ZeRO segment instead: owned_runs.)
std::pair<int64_t, int64_t> owned_range(int64_t total, int rank, const Grid& grid);
// The runs replica r owns of `layout` (its ep rank's buffer), [begin, end) each: owned_range's
// one, or with ZeRO under expert parallelism what the runtime owns (parallel::zero_segments).
std::vector<std::pair<int64_t, int64_t>> owned_runs(const model::ParamLayout& layout, int rank,
                                                    const Grid& grid);
// Refuses (ConfigError) a grid that does not split the model as a run would (tp, ep, cp, pp).
void check_grid_for_model(const model::GptDims& d, const Grid& grid);
// Writes <out_root>/step_N/ from step_dir for `grid`; returns the new step dir.
std::string reshard_checkpoint(const std::string& step_dir, const Grid& grid,
                               const std::string& out_root);

}  // namespace trainer::ckpt

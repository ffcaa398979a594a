#pragma once
// manifest.json of one checkpoint step directory: what was saved, by which grid, and where each
// piece lives. A piece is one tensor's element range [a, b) within the rank-local tensor (which
// is the global tensor's tp slice `split_dim`/`tp_ranges`); each kind (param, m, v) of a piece is
// one safetensors tensor "<kind>/<tensor name>" in that rank's file.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/run_resume.h"
#include "runtime/core/step_totals.h"
#include "runtime/data/loader.h"
#include "runtime/data/shard_summary.h"
#include "runtime/model/gpt_shape.h"
#include "runtime/model/param_layout.h"

namespace trainer::ckpt {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kKinds[] = {"param", "m", "v"};

struct Grid {
  int world = 1, dp = 1, tp = 1, pp = 1, cp = 1, zero = 0;
  int ep = 1;  // expert parallelism: within dp x cp (mixture-of-experts models)
  std::string describe() const;
};

struct Piece {
  std::string tensor;
  int split_dim = 0;
  std::vector<model::SliceRange> tp_ranges;  // the rank-local tensor within the global one
  int64_t a = 0, b = 0;                      // elements of the rank-local tensor
};

struct ShardFile {
  int rank = 0;
  std::string file;  // relative to the step directory
  std::string sha256;
  int64_t bytes = 0;
  std::vector<Piece> pieces;
};

struct TensorEntry {
  std::string name;
  std::vector<int64_t> global_shape;
};

struct Manifest {
  int64_t step = 0, tokens = 0, adam_step = 0;
  uint64_t seed = 0;
  std::string config_sha256;
  std::string config_yaml;  // the run's config (config::to_yaml): a resume names what it changes
  model::GptDims model;
  Grid grid;
  // The world size of the run that trained up to it: grid.world, except after `ckpt reshard`,
  // which rewrites the grid (0 in an older manifest: grid.world then).
  int trained_world = 0;
  int world_that_trained() const { return trained_world > 0 ? trained_world : grid.world; }
  data::LoaderState loader;
  int64_t loader_global_batch_tokens = 0;  // tokens per step of the saving run (0: not recorded)
  std::vector<data::ShardSummary>
      loader_shards;                   // the train shards it was reading (none: synthetic)
  std::optional<bool> loader_shuffle;  // data.shuffle of the saving run (not recorded before)
  std::vector<RunResume> resumes;      // the run's resumes so far, oldest first
  std::string run_id;  // drawn at the run's fresh start, kept by its resumes ("": not recorded)
  std::optional<StepTotals> step_totals;  // the run's steps 1..step (not recorded before)
  std::vector<TensorEntry> tensors;
  std::vector<ShardFile> shards;
  // precision.compute: fp8: the delayed-scaling states of the whole model, [n_layer, 4 linears,
  // kFp8StateFloats] in global layer order (Gpt::fp8_scaling_state; each pipeline stage's layers
  // from that stage, the same on its dp and tp ranks: the amaxes are reduced over them), so any
  // grid reads them back; empty otherwise.
  std::vector<float> fp8_scaling;
};

nlohmann::json to_json(const Manifest& m);
Manifest manifest_from_json(const nlohmann::json& j);  // throws CheckpointError
Manifest read_manifest(const std::string& step_dir);   // throws CheckpointError

// "" when the two models have the same tensors, else each setting that differs, e.g.
// "model.n_layer 4 (checkpoint) vs 2 (config)": the sizes and the number of experts (0, dense),
// and n_head (the same shapes, another model). The mixture's top_k, capacity factor and aux-loss
// weight change training, not the weights: a resume logs them with the other changed settings.
std::string model_difference(const model::GptDims& saved, const model::GptDims& wanted);

// Pieces covering flat elements [begin, end) of a layout's buffer, in layout order.
std::vector<Piece> pieces_of_range(const model::ParamLayout& layout, int64_t begin, int64_t end);
// The pieces a rank saves of its range: all of them on tp rank 0; elsewhere only the tensors the
// tp ranks slice (tp rank 0 saves the ones every tp rank holds whole: norms, biases, embeddings).
// Never the last pipeline stage's copy of wte (ParamSpec::tied_copy): the first stage saves it.
// Under expert parallelism without ZeRO (zero = the saving grid's stage) the same for ep ranks:
// all but ep rank 0 save their experts only (with ZeRO the dp ranks own disjoint dense shards).
std::vector<Piece> saved_pieces(const model::ParamLayout& layout, int64_t begin, int64_t end,
                                int zero);

}  // namespace trainer::ckpt

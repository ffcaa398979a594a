#pragma once
// What run_training builds a rank's training on, each piece from the config and the process
// grid: the groups the step talks over, this rank's slice of the model, and the checks that its
// backend runs what the config asks.
#include "runtime/config/run_config.h"
#include "runtime/core/backend.h"
#include "runtime/dist/mesh.h"
#include "runtime/model/gpt.h"
#include "runtime/train/train_step.h"

namespace trainer::train {

// The groups of one rank (a null comm where its axis has one rank).
struct RankGroups {
  dist::Comm* world = nullptr;
  DataParallel dp;        // the ranks that read different data
  DataParallel replicas;  // the gradients' replicas: dp, and the cp ranks too where cp > 1
  TensorParallel tp;
  PipelineParallel pp;
  ContextParallel cp;
  ExpertParallel ep;
};
RankGroups rank_groups(dist::Mesh& mesh, const dist::MeshShape& shape, int world_size);

// This rank's slice of the model: its pipeline stage's layers (its chunks, interleaved), its tp
// slice of them, its cp part of each sequence and its ep share of the experts.
model::GptShard rank_shard(const config::RunConfig& cfg, const dist::Mesh& mesh,
                           const dist::MeshShape& shape);

// Refuses (config::ConfigError) what this rank's backend cannot run: fp8 GEMMs without a Hopper
// GPU, context parallelism without its attention.
void check_backend_runs(const config::RunConfig& cfg, const Backend& backend,
                        const dist::MeshShape& shape);

// logging.level debug (rank 0's): what this rank holds and which kernels run.
void log_what_rank_holds(const model::Gpt& gpt, const model::GptShard& shard,
                         model::StateMemory memory, const Backend& backend);

}  // namespace trainer::train

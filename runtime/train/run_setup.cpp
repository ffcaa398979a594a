#include "runtime/train/run_setup.h"

#include <spdlog/spdlog.h>

#include <string>

namespace trainer::train {

RankGroups rank_groups(dist::Mesh& mesh, const dist::MeshShape& shape, int world_size) {
  const auto comm_if = [&](bool split, dist::Axis axis) {
    return split ? &mesh.comm(axis) : nullptr;
  };
  RankGroups g;
  g.world = comm_if(world_size > 1, dist::Axis::world);
  g.dp = DataParallel{comm_if(world_size > 1, dist::Axis::dp)};
  g.tp = TensorParallel{comm_if(shape.tp > 1, dist::Axis::tp)};
  g.pp = PipelineParallel{comm_if(shape.pp > 1, dist::Axis::pp)};
  g.cp = ContextParallel{comm_if(shape.cp > 1, dist::Axis::cp)};
  // (each cp rank reads its chunks of its dp rank's data: a replica of the gradients)
  g.replicas = shape.cp > 1 ? DataParallel{&mesh.comm(dist::Axis::dp_cp)} : g.dp;
  g.ep =
      ExpertParallel{comm_if(shape.ep > 1, dist::Axis::ep), comm_if(shape.ep > 1, dist::Axis::edp)};
  return g;
}

model::GptShard rank_shard(const config::RunConfig& cfg, const dist::Mesh& mesh,
                           const dist::MeshShape& shape) {
  model::GptShard shard = model::GptShard::stage(
      model::GptDims::from_config(cfg.model), mesh.coord().pp, shape.pp, mesh.coord().tp, shape.tp,
      cfg.parallel.sequence_parallel, config::virtual_stages_of(cfg.parallel));
  shard.cp_rank = mesh.coord().cp;
  shard.cp_size = shape.cp;
  shard.ep_rank = shape.ep > 1 ? mesh.index(dist::Axis::ep) : 0;
  shard.ep_size = shape.ep;
  return shard;
}

void check_backend_runs(const config::RunConfig& cfg, const Backend& backend,
                        const dist::MeshShape& shape) {
  if (cfg.precision.compute == "fp8" && !backend.supports_fp8() &&
      !config::emulated_fp8_for_tests(cfg))
    throw config::ConfigError(
        "config: precision.compute = fp8 needs a Hopper (sm_90) GPU or later; this rank's "
        "device is " +
        backend.name() + "; use bf16");
  if (shape.cp > 1 && !backend.supports_context_parallel())
    throw config::ConfigError("config: parallel.cp = " + std::to_string(shape.cp) +
                              " needs context-parallel attention, which the " + backend.name() +
                              " backend does not have; use parallel.cp = 1");
}

void log_what_rank_holds(const model::Gpt& gpt, const model::GptShard& shard,
                         model::StateMemory memory, const Backend& backend) {
  spdlog::debug(
      "rank 0 holds {} params in {} units: {} blocks from block {} ({} chunk(s)), tp rank {} of "
      "{}{}",
      gpt.layout().total_numel(), gpt.layout().units().size(), shard.num_layers, shard.first_layer,
      shard.chunks, shard.tp_rank, shard.tp_size,
      memory == model::StateMemory::released         ? "; params, grads and bf16 copy released"
      : memory == model::StateMemory::grads_released ? "; grads released"
                                                     : "");
  for (const auto& [family, impl] : backend.kernels())
    spdlog::debug("kernels: {}: {}", family, impl);
}

}  // namespace trainer::train

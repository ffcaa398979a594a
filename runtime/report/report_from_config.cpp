#include "runtime/report/report_from_config.h"

#include <algorithm>

#include "runtime/report/config_json.h"

namespace trainer::report {

ModelDims model_dims(const config::ModelConfig& m) {
  const bool moe = m.moe.num_experts > 0;
  return {m.vocab_size,         m.seq_len, m.n_layer, m.d_model, m.ffn_mult, m.moe.num_experts,
          moe ? m.moe.top_k : 0};
}

namespace {

ParallelInfo parallel_info(const config::RunConfig& cfg, int world_size) {
  const config::ParallelConfig& p = cfg.parallel;
  ParallelInfo info;
  info.world_size = world_size;
  info.tp = p.tp, info.pp = p.pp, info.cp = p.cp, info.ep = p.ep;
  info.dp = config::resolved_dp(p, world_size);
  info.zero_stage = p.zero;
  // What the run does, not what the config could ask for: sequence parallelism needs tp > 1,
  // a pipeline schedule and its microbatches need pp > 1.
  info.sequence_parallel = p.sequence_parallel && p.tp > 1;
  info.pipeline_schedule = p.pp > 1 ? p.pipeline.schedule : "none";
  info.microbatches = p.pp > 1 ? p.pipeline.microbatches : 1;
  info.virtual_stages = config::virtual_stages_of(p);
  info.activation_checkpointing = cfg.activation_checkpointing;
  info.precision = cfg.precision.compute;
  return info;
}

}  // namespace

RunReport report_skeleton(const config::RunConfig& cfg, const RunContext& ctx) {
  RunReport r;
  r.run.name = cfg.run.name;
  r.run.config_sha256 = ctx.config_sha256;
  r.run.seed = cfg.run.seed;
  r.run.git_rev = build_git_rev();
  r.config = config_json(cfg);
  r.run.started_at = now_iso8601();
  r.run.resumed_from_step = ctx.resumed_from_step;
  r.run.resumes = ctx.resumes;
  r.run.run_id = ctx.run_id;
  r.run.steps_planned = cfg.train.steps;

  r.hardware.device_type = cfg.hardware.device;
  r.hardware.device_name = ctx.device_name.empty() ? cfg.hardware.device : ctx.device_name;
  r.hardware.device_count = ctx.world_size;
  r.hardware.nodes = ctx.nodes;
  r.hardware.peak_tflops_per_device = ctx.peak.tflops;
  r.hardware.peak_source = ctx.peak.source;
  r.hardware.kernels = ctx.kernels;

  r.parallel = parallel_info(cfg, ctx.world_size);

  r.batch.micro_batch = cfg.train.micro_batch;
  r.batch.grad_accum = cfg.train.grad_accum;
  r.batch.seq_len = cfg.model.seq_len;
  r.batch.global_batch_sequences =
      int64_t(cfg.train.micro_batch) * cfg.train.grad_accum * r.parallel.dp;
  r.batch.tokens_per_step = r.batch.global_batch_sequences * cfg.model.seq_len;

  const ModelDims dims = model_dims(cfg.model);
  const ParamCounts params = count_params(dims);
  r.model.arch = cfg.model.arch;
  r.model.params = params.total;
  r.model.non_embedding_params = params.non_embedding;
  r.model.active_non_embedding_params = params.active_non_embedding;
  r.model.num_experts = cfg.model.moe.num_experts;
  r.model.top_k = dims.top_k;
  r.model.capacity_factor = cfg.model.moe.capacity_factor;
  r.model.n_layer = cfg.model.n_layer;
  r.model.d_model = cfg.model.d_model;
  r.model.n_head = cfg.model.n_head;
  r.model.vocab_size = cfg.model.vocab_size;
  r.model.padded_vocab_size = cfg.model.padded_vocab_size();
  r.model.flops_per_token = flops_per_token(dims);

  r.data.train = cfg.data.train;
  return r;
}

}  // namespace trainer::report

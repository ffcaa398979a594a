#pragma once
// One data-parallel (or tensor- or pipeline-parallel) rank of a short training run, recorded for
// comparison across backends and communicators: a few steps of TrainStep on a fresh Gpt, then the
// checkpoint path (the owned shard through a HostShard copy, pushed back, every rank's weights
// synced from the owners) and one evaluation. A dp rank r's batches depend on r only, so runs of
// the same config are comparable; tp ranks and pipeline stages all read dp rank 0's.
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/core/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/model/gpt.h"
#include "runtime/train/host_shard.h"
#include "runtime/train/train_step.h"
#include "tests/unit/dist/comm_harness.h"

namespace trainer::testing {

struct DpTrace {
  std::vector<double> losses, norms;
  std::vector<float> owned_params;  // this rank's checkpoint shard after the steps
  double resumed_eval = 0;          // the loss after the resume path: shard pushed back, synced
};

// What the ranks of a run split: the batch (dp), every layer (tp, and tp with sequence
// parallelism) or the layers (pp: pipeline stages, cfg.parallel.pipeline's schedule and pieces);
// tp and pp ranks see the same data; so do cp ranks (context parallelism: each its chunks of
// the sequences), which are also the gradients' replicas (over a second communicator).
// ep: dp ranks that are one expert-parallel group too (a mixture-of-experts config; each rank
// holds its experts, and none shares them: the edp groups have one rank each).
enum class Split { dp, tp, tp_sp, pp, cp, ep };

// cp_comm: the cp group's communicator (Split::cp; `comm` is then the replicas' group), or the ep
// group's (Split::ep, with edp_comm the rank's edp group).
inline DpTrace train_dp_rank(const config::RunConfig& cfg, Backend& be, int rank, dist::Comm& comm,
                             int steps, Split split = Split::dp, dist::Comm* cp_comm = nullptr,
                             dist::Comm* edp_comm = nullptr) {
  const auto dims = model::GptDims::from_config(cfg.model);
  const bool tp = split == Split::tp || split == Split::tp_sp, pp = split == Split::pp,
             cp = split == Split::cp;
  model::GptShard model_shard =
      pp ? model::GptShard::stage(dims, rank, comm.size(), 0, 1, false,
                                  config::virtual_stages_of(cfg.parallel))
         : model::GptShard::tp_slice(dims, tp ? rank : 0, tp ? comm.size() : 1,
                                     split == Split::tp_sp);
  const bool ep = split == Split::ep;
  if (cp) model_shard.cp_rank = rank, model_shard.cp_size = comm.size();
  if (ep) model_shard.ep_rank = rank, model_shard.ep_size = comm.size();
  const bool replicated = split == Split::dp || cp || ep;  // (TrainStep's DataParallel below)
  model::Gpt gpt(be, dims, model_shard,  // released and releasable as run.cpp makes them
                 parallel::zero_state_memory(cfg.parallel.zero, replicated ? comm.size() : 1));
  gpt.set_compute_bf16(cfg.precision.compute == "bf16");
  gpt.set_compute_fp8(cfg.precision.compute == "fp8");
  train::TrainStep step(
      cfg, be, gpt, train::DataParallel{split == Split::dp || cp || ep ? &comm : nullptr},
      train::TensorParallel{tp ? &comm : nullptr}, train::PipelineParallel{pp ? &comm : nullptr},
      train::ContextParallel{cp ? cp_comm : nullptr},
      train::ExpertParallel{ep ? cp_comm : nullptr, ep ? edp_comm : nullptr});
  step.init_weights(cfg.run.seed);  // (ZeRO 3: only the owned shards, as a run)
  if (gpt.fp8_states_new()) step.seed_fp8_weight_scales();  // as a run does
  if (tp || pp || cp) rank = 0;                             // the data of dp rank 0
  const int n = cfg.train.micro_batch * cfg.model.seq_len;
  int call = 0;
  const train::BatchSource batches = [&](int32_t* x, int32_t* y) {
    for (int i = 0; i < n; ++i) {
      x[i] = (i * 7 + rank + 3 * call) % cfg.model.vocab_size;
      y[i] = (i * 5 + 3 + rank + call) % cfg.model.vocab_size;
    }
    ++call;
  };
  DpTrace t;
  for (int s = 0; s < steps; ++s) {
    const train::StepResult r = step.run(s, batches);
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
  }
  const train::OwnedState owned = step.owned_state();
  train::HostShard host(be, owned, be.device() != DeviceType::cpu);  // as checkpointing does
  host.pull();
  for (const ckpt::OwnedShard& run : host.shard())
    t.owned_params.insert(t.owned_params.end(), run.params, run.params + (run.end - run.begin));
  host.push();  // what a checkpoint load does, then every rank's weights from the owners
  step.sync_params_from_owners();
  t.resumed_eval = step.evaluate(1, batches);
  return t;
}

// A rank's backend, made on its own thread; it may wrap the rank's Gloo "dp" communicator.
using RankBackend = std::function<std::unique_ptr<Backend>(std::unique_ptr<dist::Comm>& comm)>;
// What the backend needs of a further communicator of the rank (Split::cp's cp group), made
// after its backend: the same wrapping as RankBackend gives the first.
using RankComm = std::function<std::unique_ptr<dist::Comm>(std::unique_ptr<dist::Comm> comm)>;

// train_dp_rank on `ranks` threads (dp or tp ranks), each with the backend `make` gives it; every
// rank must finish without an error (`what` names the run in the failure message).
inline std::vector<DpTrace> run_dp_ranks(const config::RunConfig& cfg, int ranks, int steps,
                                         const RankBackend& make, const std::string& what,
                                         Split split = Split::dp, const RankComm& wrap = nullptr) {
  std::vector<DpTrace> traces(static_cast<size_t>(ranks));
  const auto errors = dist::testing::run_ranks(ranks, [&](dist::testing::RankContext& ctx) {
    std::unique_ptr<dist::Comm> comm = dist::testing::make_comm(
        ctx, 60,
        split == Split::dp || split == Split::cp || split == Split::ep ? "dp"
        : split == Split::pp                                           ? "pp"
                                                                       : "tp");
    std::unique_ptr<Backend> be = make(comm);
    // Split::cp's cp group, or Split::ep's ep group and this rank's own edp group
    auto group = [&](const std::string& name, int rank, int size) {
      dist::CommOptions opts;
      opts.name = name;
      opts.timeout_s = 60;
      std::unique_ptr<dist::Comm> c = dist::make_gloo_comm(
          dist::make_prefix_store(ctx.group, name + (size == 1 ? std::to_string(ctx.rank) : "")),
          rank, size, opts);
      return wrap ? wrap(std::move(c)) : std::move(c);
    };
    std::unique_ptr<dist::Comm> cp_comm, edp_comm;
    if (split == Split::cp) cp_comm = group("cp", ctx.rank, ctx.size);
    if (split == Split::ep) {
      cp_comm = group("ep", ctx.rank, ctx.size);
      edp_comm = group("edp", 0, 1);
    }
    traces[static_cast<size_t>(ctx.rank)] =
        train_dp_rank(cfg, *be, ctx.rank, *comm, steps, split, cp_comm.get(), edp_comm.get());
  });
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << " (" << what << "): " << errors[r]);
    REQUIRE(errors[r].empty());
  }
  return traces;
}

}  // namespace trainer::testing

#pragma once
// One data-parallel rank of a short training run, recorded for comparison across backends and
// communicators: a few steps of TrainStep on a fresh Gpt, then the checkpoint path (the owned
// shard through a HostShard copy, pushed back, every rank's weights synced from the owners) and
// one evaluation. Rank r's batches depend on r only, so runs of the same config are comparable.
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/core/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/model/gpt.h"
#include "runtime/train/host_shard.h"
#include "runtime/train/train_step.h"

namespace trainer::testing {

struct DpTrace {
  std::vector<double> losses, norms;
  std::vector<float> owned_params;  // this rank's checkpoint shard after the steps
  double resumed_eval = 0;          // the loss after the resume path: shard pushed back, synced
};

inline DpTrace train_dp_rank(const config::RunConfig& cfg, Backend& be, int rank, dist::Comm& comm,
                             int steps) {
  const auto dims = model::GptDims::from_config(cfg.model);
  model::Gpt gpt(be, dims, model::GptShard::whole(dims));
  gpt.init_weights(cfg.run.seed);
  gpt.set_compute_bf16(cfg.precision.compute == "bf16");
  gpt.set_compute_fp8(cfg.precision.compute == "fp8");
  train::TrainStep step(cfg, be, gpt, train::DataParallel{&comm});
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
  const ckpt::OwnedShard shard = host.shard();
  if (shard.params) t.owned_params.assign(shard.params, shard.params + (shard.end - shard.begin));
  host.push();  // what a checkpoint load does, then every rank's weights from the owners
  step.sync_params_from_owners();
  t.resumed_eval = step.evaluate(1, batches);
  return t;
}

}  // namespace trainer::testing

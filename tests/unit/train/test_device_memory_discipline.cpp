// Everything above the Backend (model, TrainStep, gradient buckets, ZeRO 1-3, the checkpoint's
// host copy) reaches backend memory only through Backend ops and Comm calls, as the cuda backend
// and NCCL need: on OpaqueBackend/OpaqueComm (opaque_device.h), where a host access to backend
// memory faults (the test dies of SIGSEGV), two data-parallel ranks train for three steps in
// every ZeRO stage and precision, then take the checkpoint-resume path, and give the plain cpu
// run's losses, gradient norms and weights bit for bit.
#include <catch2/catch.hpp>
#include <sstream>
#include <vector>

#include "../dist/comm_harness.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/train/host_shard.h"
#include "runtime/train/train_step.h"
#include "tests/unit/small_train_config.h"
#include "tests/unit/train/opaque_device.h"

using namespace trainer;

namespace {

constexpr int kDp = 2, kSteps = 3;

struct Trace {
  std::vector<double> losses, norms;
  std::vector<float> owned_params;  // this rank's checkpoint shard after the steps
  double resumed_eval = 0;          // the loss after the resume path: shard pushed back, synced
};

Trace train_ranks(const config::RunConfig& cfg, bool opaque, int rank, dist::Comm& comm) {
  std::unique_ptr<Backend> be;
  if (opaque)
    be = std::make_unique<testing::OpaqueBackend>();
  else
    be = std::make_unique<cpu::CpuBackend>();
  const auto dims = model::GptDims::from_config(cfg.model);
  model::Gpt gpt(*be, dims, model::GptShard::whole(dims));
  gpt.init_weights(cfg.run.seed);
  gpt.set_compute_bf16(cfg.precision.compute == "bf16");
  gpt.set_compute_fp8(cfg.precision.compute == "fp8");
  train::TrainStep step(cfg, *be, gpt, train::DataParallel{&comm});
  const int n = cfg.train.micro_batch * cfg.model.seq_len;
  int call = 0;
  const train::BatchSource batches = [&](int32_t* x, int32_t* y) {
    for (int i = 0; i < n; ++i) {
      x[i] = (i * 7 + rank + 3 * call) % cfg.model.vocab_size;
      y[i] = (i * 5 + 3 + rank + call) % cfg.model.vocab_size;
    }
    ++call;
  };
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    const train::StepResult r = step.run(s, batches);
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
  }
  const train::OwnedState owned = step.owned_state();
  train::HostShard host(*be, owned, be->device() != DeviceType::cpu);  // as checkpointing does
  host.pull();
  const ckpt::OwnedShard shard = host.shard();
  if (shard.params) t.owned_params.assign(shard.params, shard.params + (shard.end - shard.begin));
  host.push();  // what a checkpoint load does, then every rank's weights from the owners
  step.sync_params_from_owners();
  t.resumed_eval = step.evaluate(1, batches);
  return t;
}

std::vector<Trace> run(const config::RunConfig& cfg, bool opaque) {
  std::vector<Trace> traces(kDp);
  const auto errors = dist::testing::run_ranks(kDp, [&](dist::testing::RankContext& ctx) {
    std::unique_ptr<dist::Comm> comm = dist::testing::make_comm(ctx, 20, "dp");
    if (opaque) comm = std::make_unique<testing::OpaqueComm>(std::move(comm));
    traces[static_cast<size_t>(ctx.rank)] = train_ranks(cfg, opaque, ctx.rank, *comm);
  });
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << (opaque ? " (opaque device)" : " (cpu)") << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
  return traces;
}

}  // namespace

TEST_CASE("training_touches_backend_memory_only_through_the_backend_and_comm", "[train][zero]") {
  struct Case {
    int zero;
    const char* precision;
  };
  for (const Case c : {Case{0, "fp32"}, Case{1, "bf16"}, Case{2, "bf16"}, Case{2, "fp32"},
                       Case{3, "fp32"}, Case{3, "bf16"}, Case{0, "fp8"}, Case{3, "fp8"}}) {
    config::RunConfig cfg = testing::small_train_config();
    cfg.parallel.zero = c.zero;
    cfg.precision.compute = c.precision;
    cfg.train.grad_accum = 2;    // ZeRO-2/3 reduce-scatter per micro-batch
    cfg.train.grad_clip = 0.05;  // small enough to clip: scale_grads runs too
    const std::vector<Trace> cpu = run(cfg, false), opaque = run(cfg, true);
    for (int r = 0; r < kDp; ++r) {
      const Trace &a = cpu[size_t(r)], &b = opaque[size_t(r)];
      std::ostringstream what;
      what << "zero " << c.zero << ", " << c.precision << ", rank " << r << ": losses";
      for (size_t s = 0; s < a.losses.size(); ++s) what << " " << a.losses[s] << "/" << b.losses[s];
      INFO(what.str());
      CHECK(a.losses == b.losses);
      CHECK(a.norms == b.norms);
      CHECK(a.owned_params == b.owned_params);
      CHECK(a.resumed_eval == b.resumed_eval);
      CHECK(a.losses.back() < a.losses.front());
    }
  }
}

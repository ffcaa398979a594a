// The checkpoint seam under ZeRO: owned_state() of the dp ranks tiles the flat buffer with
// contiguous shards, and sync_params_from_owners() rebuilds every rank's working weights from
// the owners' shards alone (what a checkpoint load leaves behind).
#include <catch2/catch.hpp>
#include <stdexcept>

#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

#include "../dist/comm_harness.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/parallel/zero_layout.h"
#include "runtime/train/train_step.h"
#include "tests/unit/small_train_config.h"

using namespace trainer;

namespace {

config::RunConfig small_config(int zero) {
  config::RunConfig cfg = testing::small_train_config();
  cfg.parallel.zero = zero;
  return cfg;
}

train::BatchSource fixed_batches(int rank, int n) {
  return [rank, n](int32_t* x, int32_t* y) {
    for (int i = 0; i < n; ++i) {
      x[i] = (i * 7 + rank) % 32;
      y[i] = (i * 5 + 3 + rank) % 32;
    }
  };
}

// One dp rank of the small model under ZeRO `zero`, stepping through TrainStep (built after the
// weights are initialized: ZeRO 3 releases what its rank does not own as it starts).
struct ZeroRank {
  ZeroRank(dist::testing::RankContext& ctx, int zero)
      : comm(dist::testing::make_comm(ctx, 20, "dp")),
        cfg(small_config(zero)),
        dims(model::GptDims::from_config(cfg.model)),
        gpt(be, dims, model::GptShard::whole(dims)) {
    gpt.init_weights(cfg.run.seed);
    step = std::make_unique<train::TrainStep>(cfg, be, gpt, train::DataParallel{comm.get()});
  }
  std::unique_ptr<dist::Comm> comm;
  const config::RunConfig cfg;
  cpu::CpuBackend be;
  const model::GptDims dims;
  model::Gpt gpt;
  std::unique_ptr<train::TrainStep> step;
};

struct RankOutcome {
  int64_t begin = 0, end = 0;
  double loss_before = 0, loss_after = 0;
};

}  // namespace

TEST_CASE("zero owned_state tiles the buffer and sync_params_from_owners restores the weights",
          "[zero]") {
  for (int zero : {1, 2, 3}) {
    const int dp = 2;
    std::vector<RankOutcome> out(dp);
    int64_t total = 0;
    const auto errors = dist::testing::run_ranks(dp, [&](dist::testing::RankContext& ctx) {
      ZeroRank rank(ctx, zero);
      const config::RunConfig& cfg = rank.cfg;
      model::Gpt& gpt = rank.gpt;
      train::TrainStep& step = *rank.step;
      const auto batches = fixed_batches(ctx.rank, cfg.train.micro_batch * cfg.model.seq_len);
      step.run(0, batches);
      RankOutcome& o = out[static_cast<size_t>(ctx.rank)];
      o.loss_before = step.evaluate(1, batches);
      const train::OwnedState state = step.owned_state();
      // one shard of the whole buffer (thrown, not REQUIREd: Catch2 is not thread-safe)
      if (state.runs.size() != 1) throw std::runtime_error("more than one owned run");
      const ckpt::OwnedShard& s = state.runs[0];
      o.begin = s.begin;
      o.end = s.end;
      if (ctx.rank == 0) total = gpt.layout().total_numel();
      // Everything outside the owned shard is lost, as after a checkpoint load.
      float* p = static_cast<float*>(gpt.params().data);
      for (int64_t i = 0; i < gpt.layout().total_numel(); ++i)
        if (i < s.begin || i >= s.end) p[i] = 1e3f;
      step.sync_params_from_owners();
      o.loss_after = step.evaluate(1, batches);
    });
    for (size_t r = 0; r < errors.size(); ++r) {
      INFO("zero " << zero << " rank " << r << ": " << errors[r]);
      REQUIRE(errors[r].empty());
    }
    INFO("zero " << zero << ": shards [" << out[0].begin << ", " << out[0].end << ") ["
                 << out[1].begin << ", " << out[1].end << ") of " << total);
    CHECK(out[0].begin == 0);
    CHECK(out[0].end == out[1].begin);
    CHECK(out[1].end == total);
    for (const RankOutcome& o : out) {
      INFO("eval loss before " << o.loss_before << " after sync " << o.loss_after);
      CHECK(o.loss_after == o.loss_before);
    }
  }
}

// The staging ZeroOptimizer allocates (after a step, its reduce-scatters all made) is what
// parallel::zero_staging_floats says, the figure `trainer plan` counts.
TEST_CASE("zero staging is what zero_layout says, at dp 2 and 3", "[zero]") {
  for (int dp : {2, 3}) {
    for (int zero : {1, 2, 3}) {
      std::vector<int64_t> staging(static_cast<size_t>(dp)), predicted(staging.size());
      const auto errors = dist::testing::run_ranks(dp, [&](dist::testing::RankContext& ctx) {
        ZeroRank rank(ctx, zero);
        rank.step->run(
            0, fixed_batches(ctx.rank, rank.cfg.train.micro_batch * rank.cfg.model.seq_len));
        const auto r = static_cast<size_t>(ctx.rank);
        staging[r] = rank.step->state_bytes().scratch;
        predicted[r] =
            4 * parallel::zero_staging_floats(zero, parallel::ZeroUnits(rank.gpt.layout(), dp));
      });
      for (size_t r = 0; r < errors.size(); ++r) {
        INFO("dp " << dp << " zero " << zero << " rank " << r << ": " << errors[r]);
        REQUIRE(errors[r].empty());
        CHECK(staging[r] == predicted[r]);
        CHECK(staging[r] > 0);
      }
    }
  }
}

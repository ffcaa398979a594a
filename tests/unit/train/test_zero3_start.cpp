// ZeRO 3's start (DeepSpeed's zero.Init): the model's params and bf16 copy start released, the
// optimizer acquires the shard a rank owns, and only that is drawn. On the cpu backend's fault
// mode (a touch of released memory dies of SIGSEGV) the weights drawn within ranges are those of
// the whole init, bit for bit, and two ZeRO 3 ranks hold their shards only, not the whole params,
// once TrainStep is made and the weights drawn.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/host_pages.h"
#include "runtime/parallel/zero_layout.h"
#include "runtime/train/train_step.h"
#include "tests/unit/dist/comm_harness.h"
#include "tests/unit/small_train_config.h"

using namespace trainer;

namespace {

std::vector<float> host_copy(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.to_host(v.data(), t);
  return v;
}

}  // namespace

TEST_CASE("init_weights_within_draws_the_whole_inits_weights_in_its_ranges_only", "[train][zero]") {
  const config::RunConfig cfg = testing::small_train_config(64, 16, 2, 64, 4);
  const auto dims = model::GptDims::from_config(cfg.model);
  cpu::CpuBackend plain;
  model::Gpt whole(plain, dims, model::GptShard::whole(dims));
  whole.init_weights(7);
  const std::vector<float> expected = host_copy(plain, whole.params());

  cpu::CpuBackend faulting(/*fault_released=*/true);
  model::Gpt gpt(faulting, dims, model::GptShard::whole(dims), model::StateMemory::released);
  const int64_t n = gpt.params().numel();
  // one range inside a tensor, one across tensors' ends, one at the buffer's end
  const std::vector<model::Gpt::ElementRange> ranges = {
      {100, 900}, {n / 2 - 5000, n / 2 + 3000}, {n - 700, n}};
  for (const auto& r : ranges) faulting.acquire(gpt.params().slice(r.begin, r.end - r.begin));
  gpt.init_weights_within(7, ranges);  // a write outside them faults
  int64_t held = 0;
  for (const auto& r : ranges) {
    const Tensor part = gpt.params().slice(r.begin, r.end - r.begin);
    const std::vector<float> got = host_copy(faulting, part);
    INFO("range [" << r.begin << ", " << r.end << ")");
    CHECK(std::vector<float>(expected.begin() + r.begin, expected.begin() + r.end) == got);
    held += static_cast<int64_t>(part.nbytes());
  }
  // only the ranges' pages were ever mapped (2 edge pages a range at most)
  const auto page = static_cast<int64_t>(cpu::page_size());
  CHECK(faulting.resident_bytes(gpt.params()) <= held + 2 * page * 3);
  CHECK(faulting.resident_bytes(gpt.params()) * 4 < static_cast<int64_t>(gpt.params().nbytes()));
}

// Two ZeRO 3 ranks, as run.cpp makes them (the model's memory from zero_state_memory, TrainStep,
// then TrainStep::init_weights): the model is made holding nothing; then each rank holds its shard
// of the params, and the bf16 copy not at all, before the first step (the fault mode kills a touch
// of anything else); the shards are the whole init's weights.
TEST_CASE("zero3_ranks_hold_only_their_shard_at_the_start", "[train][zero]") {
  config::RunConfig cfg = testing::small_train_config(64, 16, 4, 64, 4);
  cfg.parallel.zero = 3;
  cfg.precision.compute = "bf16";
  const auto dims = model::GptDims::from_config(cfg.model);
  std::vector<float> expected;
  {
    cpu::CpuBackend be;
    model::Gpt whole(be, dims, model::GptShard::whole(dims));
    whole.init_weights(cfg.run.seed);
    expected = host_copy(be, whole.params());
  }
  constexpr int kDp = 2;
  struct Start {
    int64_t made_resident = 0;  // params and bf16 copy, once the model is made
    int64_t params_resident = 0, copy_resident = 0, owned_bytes = 0, total_bytes = 0;
    bool shard_matches = false;
  };
  std::vector<Start> starts(kDp);
  const auto errors = dist::testing::run_ranks(kDp, [&](dist::testing::RankContext& ctx) {
    auto comm = dist::testing::make_comm(ctx, 60, "dp");
    cpu::CpuBackend be(/*fault_released=*/true);
    model::Gpt gpt(be, dims, model::GptShard::whole(dims),
                   parallel::zero_state_memory(cfg.parallel.zero, comm->size()));
    gpt.set_compute_bf16(true);
    Start& s = starts[static_cast<size_t>(ctx.rank)];
    s.made_resident = be.resident_bytes(gpt.params()) + be.resident_bytes(gpt.bf16_copy());
    train::TrainStep step(cfg, be, gpt, train::DataParallel{comm.get()});
    step.init_weights(cfg.run.seed);
    s.params_resident = be.resident_bytes(gpt.params());
    s.copy_resident = be.resident_bytes(gpt.bf16_copy());
    s.total_bytes = static_cast<int64_t>(gpt.params().nbytes());
    s.shard_matches = true;
    for (const ckpt::OwnedShard& run : step.owned_state().runs) {
      s.owned_bytes += (run.end - run.begin) * 4;
      const std::vector<float> got =
          host_copy(be, gpt.params().slice(run.begin, run.end - run.begin));
      s.shard_matches = s.shard_matches && got == std::vector<float>(expected.begin() + run.begin,
                                                                     expected.begin() + run.end);
    }
  });
  const auto page = static_cast<int64_t>(cpu::page_size());
  for (int r = 0; r < kDp; ++r) {
    const Start& s = starts[static_cast<size_t>(r)];
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)] << "; made with " << s.made_resident
                 << " B resident; params resident " << s.params_resident << " B of "
                 << s.total_bytes << ", owned " << s.owned_bytes << "; bf16 copy resident "
                 << s.copy_resident);
    REQUIRE(errors[static_cast<size_t>(r)].empty());
    CHECK(s.shard_matches);
    CHECK(s.made_resident <= 4 * page);  // (each allocation's partial edge pages at most)
    CHECK(s.owned_bytes * kDp <= s.total_bytes + kDp * 4);
    CHECK(s.params_resident <= s.owned_bytes + 2 * page);
    CHECK(s.copy_resident <= 2 * page);  // (the allocation's partial edge pages at most)
  }
}

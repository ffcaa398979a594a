// Tensor parallelism inside the model, Megatron's layout: column-parallel qkv and fc,
// row-parallel attention and MLP projections, whose partial outputs (and the column-parallel
// layers' partial input gradients) Hooks::tp_all_reduce sums, and a vocabulary-parallel wte:
// each shard embeds and scores its half of the vocabulary, the cross-entropy's statistics
// all-gathered (Hooks::tp_all_gather). Two shards, each a rank thread
// with its own cpu backend, sum over a Gloo communicator (tests/unit/dist's harness). Their loss
// equals the whole model's, and each shard's gradients equal the whole model's restricted to its
// slice (within fp32 rounding: the partial sums add in another order). The row-parallel layers'
// bias and the residual stream enter the partial sums on tp rank 0 only; added on every rank, they
// would be counted tp times.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "tests/unit/cpu/op_test_util.h"
#include "tests/unit/dist/comm_harness.h"

using namespace trainer;

namespace {

// V, T, L, C, NH, F, vocab_multiple: 61 classes padded to 62 rows, the padding in shard 1's half
const model::GptDims kDims{61, 16, 2, 64, 4, 4, 2};
constexpr int kB = 2, kT = 16, kTp = 2;

model::GptShard tp_shard(int rank) {
  model::GptShard s = model::GptShard::whole(kDims);
  s.tp_rank = rank, s.tp_size = kTp;
  return s;
}

struct Run {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;  // by parameter name, this shard's slice
};

// tp: the tensor-parallel group (null: the whole model).
Run run(const model::GptShard& shard, dist::Comm* tp, model::Recompute recompute) {
  cpu::CpuBackend be;
  model::Gpt gpt(be, kDims, shard);
  gpt.init_weights(7);
  if (tp) {
    gpt.hooks().tp_all_reduce = [tp](Tensor t) {
      tp->all_reduce(t.data, static_cast<size_t>(t.numel()), dist::CommDType::f32,
                     dist::ReduceOp::sum);
    };
    gpt.hooks().tp_all_gather = [tp](const Tensor& rows, Tensor whole) {
      tp->all_gather(rows.data, whole.data, rows.nbytes(), dist::CommDType::u8);
    };
  }
  gpt.allocate_activations(kB, kT, recompute);
  SplitMix64 rng(23);
  std::vector<int32_t> x, y;
  for (int i = 0; i < kB * kT; ++i) {
    x.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
    y.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
  }
  be.zero(gpt.grads());
  Run r;
  r.loss = gpt.forward(x.data(), y.data(), 1.0f / (kB * kT));
  gpt.backward();
  for (const model::ParamSpec& p : gpt.layout().params()) {
    std::vector<float>& g = r.grads[p.name];
    g.resize(static_cast<size_t>(p.numel));
    be.to_host(g.data(), gpt.grad(p));
  }
  return r;
}

}  // namespace

TEST_CASE("tensor_parallel_shards_match_the_whole_model", "[model][tp]") {
  for (const model::Recompute recompute : {model::Recompute::none, model::Recompute::full}) {
    INFO("recompute " << static_cast<int>(recompute));
    const Run whole = run(model::GptShard::whole(kDims), nullptr, recompute);
    Run shards[kTp];
    const std::vector<std::string> errors =
        dist::testing::run_ranks(kTp, [&](dist::testing::RankContext& ctx) {
          auto tp = dist::testing::make_comm(ctx, 60, "tp");
          shards[ctx.rank] = run(tp_shard(ctx.rank), tp.get(), recompute);
        });
    for (int r = 0; r < kTp; ++r) {
      INFO("tp rank " << r << ": " << errors[static_cast<size_t>(r)]);
      REQUIRE(errors[static_cast<size_t>(r)].empty());
    }
    for (int r = 0; r < kTp; ++r) {
      INFO("tp rank " << r << ": loss " << shards[r].loss << ", whole model " << whole.loss);
      CHECK(std::fabs(shards[r].loss - whole.loss) <= 1e-6 * std::fabs(whole.loss));
      const model::ParamLayout layout(kDims, tp_shard(r));
      for (const model::ParamSpec& p : layout.params()) {
        std::vector<float> want(static_cast<size_t>(p.numel));
        model::extract_local(p, whole.grads.at(p.name).data(), want.data());
        const double err = cpu::test::grad_error(cpu::test::to_double(shards[r].grads.at(p.name)),
                                                 cpu::test::to_double(want))
                               .rel;
        INFO(p.name << ": relative L2 difference " << err);
        CHECK(err < 1e-5);
      }
    }
  }
}

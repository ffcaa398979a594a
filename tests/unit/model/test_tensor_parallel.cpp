// Tensor parallelism inside the model, Megatron's layout: column-parallel qkv and fc,
// row-parallel attention and MLP projections, whose partial outputs (and the column-parallel
// layers' partial input gradients) Hooks::tp_all_reduce sums. Two shards, each in its own thread
// with its own cpu backend, sum through host memory. Their loss equals the whole model's, and
// each shard's gradients equal the whole model's restricted to its slice (within fp32 rounding:
// the partial sums add in another order). The row-parallel layers' bias and the residual stream
// enter the partial sums on tp rank 0 only; added on every rank, they would be counted tp times.
#include <algorithm>
#include <barrier>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"

using namespace trainer;

namespace {

const model::GptDims kDims{61, 16, 2, 64, 4, 4};  // V, T, L, C, NH, F
constexpr int kB = 2, kT = 16, kTp = 2;

// The tp group's all-reduce over kTp threads: every rank adds the parts in rank order.
struct HostAllReduce {
  std::barrier<> sync{kTp};
  std::vector<float> part[kTp];
  void operator()(Backend& be, int rank, Tensor t) {
    part[rank].resize(static_cast<size_t>(t.numel()));
    be.to_host(part[rank].data(), t);
    sync.arrive_and_wait();
    std::vector<float> sum(part[rank].size(), 0.0f);
    for (const std::vector<float>& p : part)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
    sync.arrive_and_wait();  // every rank has read every part
    be.from_host(t, sum.data());
  }
};

struct Run {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;  // by parameter name, this shard's slice
};

Run run(const model::GptShard& shard, HostAllReduce* all_reduce, model::Recompute recompute) {
  cpu::CpuBackend be;
  model::Gpt gpt(be, kDims, shard);
  gpt.init_weights(7);
  if (all_reduce)
    gpt.hooks().tp_all_reduce = [&](Tensor t) { (*all_reduce)(be, shard.tp_rank, t); };
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

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += std::pow(double(got[i]) - want[i], 2);
    norm += std::pow(double(want[i]), 2);
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

}  // namespace

TEST_CASE("tensor_parallel_shards_match_the_whole_model", "[model][tp]") {
  for (const model::Recompute recompute : {model::Recompute::none, model::Recompute::full}) {
    INFO("recompute " << static_cast<int>(recompute));
    const Run whole = run(model::GptShard::whole(kDims), nullptr, recompute);
    HostAllReduce all_reduce;
    Run shards[kTp];
    {
      std::vector<std::jthread> ranks;
      for (int r = 0; r < kTp; ++r)
        ranks.emplace_back([&, r] {
          model::GptShard s = model::GptShard::whole(kDims);
          s.tp_rank = r, s.tp_size = kTp;
          shards[r] = run(s, &all_reduce, recompute);
        });
    }
    const model::ParamLayout whole_layout(kDims, model::GptShard::whole(kDims));
    for (int r = 0; r < kTp; ++r) {
      INFO("tp rank " << r << ": loss " << shards[r].loss << ", whole model " << whole.loss);
      CHECK(std::fabs(shards[r].loss - whole.loss) <= 1e-6 * std::fabs(whole.loss));
      model::GptShard s = model::GptShard::whole(kDims);
      s.tp_rank = r, s.tp_size = kTp;
      const model::ParamLayout layout(kDims, s);
      for (const model::ParamSpec& p : layout.params()) {
        std::vector<float> want(static_cast<size_t>(p.numel));
        model::extract_local(p, whole.grads.at(p.name).data(), want.data());
        const double err = relative_l2(shards[r].grads.at(p.name), want);
        INFO(p.name << ": relative L2 difference " << err);
        CHECK(err < 1e-5);
      }
    }
  }
}

// A mixture-of-experts model on the cuda backend against the same model on the cpu: the language
// model loss, the load-balancing loss and every gradient from the same weights and tokens (the
// routing runs on the host from each backend's router logits).
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/model/gpt.h"
#include "tests/unit/cuda/cuda_test_util.h"

using namespace trainer;
using namespace trainer::cuda::test;

namespace {

struct MoeRun {
  double loss = 0, balance = 0;
  int64_t dropped = 0;
  std::vector<float> grads;
};

MoeRun run_moe(Backend& be, bool bf16) {
  model::GptDims d{64, 32, 2, 64, 4, 4};
  d.num_experts = 4;
  d.top_k = 2;
  d.capacity_factor = 1.0;
  model::Gpt gpt(be, d, model::GptShard::whole(d));
  gpt.init_weights(7);
  gpt.set_compute_bf16(bf16);
  const int B = 4, T = 32;
  gpt.allocate_activations(B, T);
  std::vector<int32_t> x(B * T), y(B * T);
  SplitMix64 rng(3);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>(rng.next() % 64);
    y[i] = static_cast<int32_t>(rng.next() % 64);
  }
  be.zero(gpt.grads());
  MoeRun r;
  r.loss = gpt.forward(x.data(), y.data(), 1.0f / (B * T));
  r.balance = gpt.take_moe_balance_loss();
  r.dropped = gpt.take_moe_dropped();
  gpt.backward();
  r.grads.resize(static_cast<size_t>(gpt.grads().numel()));
  be.to_host(r.grads.data(), gpt.grads());
  return r;
}

}  // namespace

TEST_CASE("cuda_moe_model_matches_cpu_loss_balance_and_gradients", "[cuda][moe]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const MoeRun want = run_moe(ref, false), got = run_moe(*gpu, false);
  REQUIRE(want.dropped > 0);  // the capacity drops some choices
  CHECK(got.dropped == want.dropped);
  CHECK(got.loss == Approx(want.loss).epsilon(1e-5));
  CHECK(got.balance == Approx(want.balance).epsilon(1e-5));
  check_close(got.grads, want.grads, 1e-4, "moe gradients");
  // bf16: within bf16 rounding (a token whose two best experts are within it may choose apart)
  const MoeRun want16 = run_moe(ref, true), got16 = run_moe(*gpu, true);
  CHECK(got16.loss == Approx(want16.loss).epsilon(1e-2));
  CHECK(got16.balance == Approx(want16.balance).epsilon(1e-2));
}

// Activation checkpointing: selective and full recompute give bit-identical losses and gradients
// to keeping every activation (they repeat the same ops on the same inputs), in fp32 and in
// bf16 compute, over two micro-batches accumulated; and they keep fewer bytes:
// none > selective > full.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"

using namespace trainer;

namespace {

struct Outcome {
  std::vector<double> losses;
  std::vector<float> grads;
  size_t activation_bytes = 0;
};

Outcome run(model::Recompute recompute, bool bf16) {
  const model::GptDims dims{13, 6, 3, 16, 4, 4};  // V, T, L, C, NH, F
  const int B = 2, T = 6;
  cpu::CpuBackend be;
  model::Gpt gpt(be, dims, model::GptShard::whole(dims));
  gpt.init_weights(42);
  gpt.set_compute_bf16(bf16);
  gpt.allocate_activations(B, T, recompute);
  be.zero(gpt.grads());
  SplitMix64 rng(7);
  Outcome out;
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<int32_t> x, y;
    for (int i = 0; i < B * T; ++i) {
      x.push_back(static_cast<int32_t>(rng.next() % 13));
      y.push_back(static_cast<int32_t>(rng.next() % 13));
    }
    out.losses.push_back(gpt.forward(x.data(), y.data(), 1.0f / (2 * B * T)));
    gpt.backward();
  }
  out.grads.resize(static_cast<size_t>(gpt.grads().numel()));
  be.to_host(out.grads.data(), gpt.grads());
  out.activation_bytes = gpt.activation_bytes();
  return out;
}

}  // namespace

TEST_CASE("activation_checkpointing_gives_bit_identical_gradients_with_fewer_bytes", "[model]") {
  for (bool bf16 : {false, true}) {
    const Outcome none = run(model::Recompute::none, bf16);
    const Outcome selective = run(model::Recompute::selective, bf16);
    const Outcome full = run(model::Recompute::full, bf16);
    for (const Outcome* o : {&selective, &full}) {
      INFO((o == &full ? "full" : "selective") << (bf16 ? " bf16" : " fp32"));
      CHECK(o->losses == none.losses);
      REQUIRE(o->grads.size() == none.grads.size());
      CHECK(std::memcmp(o->grads.data(), none.grads.data(), none.grads.size() * 4) == 0);
    }
    INFO("activation bytes: none " << none.activation_bytes << ", selective "
                                   << selective.activation_bytes << ", full "
                                   << full.activation_bytes);
    CHECK(none.activation_bytes > selective.activation_bytes);
    CHECK(selective.activation_bytes > full.activation_bytes);
  }
}

TEST_CASE("activation_checkpointing_names_unknown_modes", "[model]") {
  CHECK(model::parse_recompute("full") == model::Recompute::full);
  CHECK_THROWS_WITH(model::parse_recompute("some"),
                    Catch::Contains("activation_checkpointing = 'some'"));
}

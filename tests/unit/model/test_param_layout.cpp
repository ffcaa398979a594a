#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "runtime/model/param_layout.h"
#include "runtime/report/flops.h"

using namespace trainer;

TEST_CASE("layout_param_count_matches_report_formula", "[model]") {
  for (auto d :
       {model::GptDims{256, 128, 4, 128, 4, 4}, model::GptDims{50257, 1024, 12, 768, 12, 4}}) {
    model::ParamLayout layout(d, model::GptShard::whole(d));
    const auto counts =
        report::count_params({d.vocab, d.seq_len, d.n_layer, d.d_model, d.ffn_mult});
    REQUIRE(layout.total_numel() == counts.total);
  }
}

TEST_CASE("moe_layout_param_count_matches_report_formula_and_active_counts_top_k", "[model][moe]") {
  model::GptDims d{256, 128, 4, 128, 4, 4};
  d.num_experts = 8;
  d.top_k = 2;
  model::ParamLayout layout(d, model::GptShard::whole(d));
  const auto counts = report::count_params(
      {d.vocab, d.seq_len, d.n_layer, d.d_model, d.ffn_mult, d.num_experts, d.top_k});
  REQUIRE(layout.total_numel() == counts.total);
  // the active count: the same model with top_k experts and its router
  int64_t active = 0;
  for (const auto& p : layout.params()) {
    if (p.name.find("wte") != std::string::npos || p.name.find("wpe") != std::string::npos)
      continue;
    active += p.expert ? p.numel / d.num_experts * d.top_k : p.numel;
  }
  CHECK(counts.active_non_embedding == active);
  CHECK(counts.non_embedding > counts.active_non_embedding);
}

TEST_CASE("layout_units_are_contiguous_and_cover_the_buffer", "[model]") {
  model::GptDims d{64, 16, 3, 32, 4, 4};
  model::ParamLayout layout(d, model::GptShard::whole(d));
  REQUIRE(layout.units().size() == static_cast<size_t>(d.n_layer + 2));
  int64_t next = 0;
  for (const auto& u : layout.units()) {
    REQUIRE(u.offset == next);
    next += u.numel;
  }
  REQUIRE(next == layout.total_numel());
}

TEST_CASE("tp_shards_partition_every_global_tensor", "[model]") {
  model::GptDims d{64, 16, 2, 32, 4, 4};
  const int tp = 2;
  model::ParamLayout whole(d, model::GptShard::whole(d));
  for (const auto& g : whole.params()) {
    const int64_t gnumel = std::accumulate(g.global_shape.begin(), g.global_shape.end(), int64_t{1},
                                           std::multiplies<>());
    std::vector<float> global(static_cast<size_t>(gnumel));
    std::iota(global.begin(), global.end(), 0.0f);
    std::vector<float> rebuilt(global.size(), -1.0f);
    int64_t held = 0;
    for (int r = 0; r < tp; ++r) {
      model::GptShard s = model::GptShard::whole(d);
      s.tp_rank = r;
      s.tp_size = tp;
      model::ParamLayout part(d, s);
      const auto& spec = part.find(g.name);
      std::vector<float> local(static_cast<size_t>(spec.numel));
      model::extract_local(spec, global.data(), local.data());
      model::insert_local(spec, local.data(), rebuilt.data());
      held += spec.tp_replicated ? (r == 0 ? spec.numel : 0) : spec.numel;
    }
    INFO(g.name);
    REQUIRE(held == gnumel);
    REQUIRE(rebuilt == global);
  }
}

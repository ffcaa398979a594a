// plan::search_layouts: the candidates, the memory model per backend, the traffic and FLOP counts,
// and the ranking rule of layout_search.h.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <tuple>

#include "runtime/model/param_layout.h"
#include "runtime/parallel/zero_layout.h"
#include "runtime/plan/layout_search.h"
#include "runtime/report/flops.h"
#include "tests/unit/small_train_config.h"

using namespace trainer;

namespace {

config::RunConfig search_config() {
  config::RunConfig cfg = testing::small_train_config(/*vocab=*/64, /*seq_len=*/32,
                                                      /*n_layer=*/3, /*d_model=*/48,
                                                      /*n_head=*/4);
  cfg.train.micro_batch = 4;
  cfg.train.grad_accum = 3;  // 12 sequences per rank: micro_batch 1, 2, 3, 4, 6, 12
  return cfg;
}

int64_t numel(const config::RunConfig& cfg) {
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  return model::ParamLayout(dims, model::GptShard::whole(dims)).total_numel();
}

}  // namespace

TEST_CASE("search: every layout keeps the sequences per rank; dp 1 tries ZeRO 0 and the config's") {
  const config::RunConfig cfg = search_config();
  for (int dp : {1, 4}) {
    const auto layouts = plan::search_layouts({cfg, dp, plan::device_kind("h100", dp), 0.9, true});
    const int stages = dp == 1 ? 1 : 4;
    REQUIRE(layouts.size() == size_t(stages * 6 * 3));
    std::set<std::tuple<int, int, std::string>> seen;
    int configs = 0;
    for (const plan::Layout& l : layouts) {
      CHECK(l.micro_batch * l.grad_accum == 12);
      CHECK(l.zero < stages);
      seen.insert({l.zero, l.micro_batch, l.activation_checkpointing});
      configs += l.is_config;
    }
    CHECK(seen.size() == layouts.size());
    CHECK(configs == 1);
  }
  config::RunConfig zero2 = cfg;
  zero2.parallel.zero = 2;
  const auto layouts = plan::search_layouts({zero2, 1, plan::device_kind("h100", 1), 0.9, true});
  REQUIRE(layouts.size() == size_t(2 * 6 * 3));
  CHECK(std::count_if(layouts.begin(), layouts.end(),
                      [](const plan::Layout& l) { return l.is_config; }) == 1);
}

TEST_CASE("search: fits means the estimate is within the usable memory; ranked as documented") {
  config::RunConfig cfg = search_config();
  const double usable_fraction = 0.9;
  // Memory between the smallest and the largest layout, so that some fit and some do not.
  auto all = plan::search_layouts({cfg, 4, plan::device_kind("a100", 4), usable_fraction, true});
  const double smallest = all.front().total(), largest = all.back().total();
  REQUIRE(all.front().fits);
  const double memory = (smallest + largest) / 2 / usable_fraction;
  const auto layouts =
      plan::search_layouts({cfg, 4, plan::device_kind("a100", 4, memory / (1024.0 * 1024 * 1024)),
                            usable_fraction, true});
  size_t fitting = 0;
  for (const plan::Layout& l : layouts) {
    CHECK(l.fits == (l.total() <= usable_fraction * memory));
    fitting += l.fits;
  }
  REQUIRE(fitting > 0);
  REQUIRE(fitting < layouts.size());
  for (size_t i = 0; i < fitting; ++i) REQUIRE(layouts[i].fits);
  for (size_t i = 1; i < layouts.size(); ++i) {
    const plan::Layout &a = layouts[i - 1], &b = layouts[i];
    INFO("rank " << i << ": zero " << b.zero << " mb " << b.micro_batch << " "
                 << b.activation_checkpointing);
    if (!a.fits) {
      CHECK(a.total() <= b.total());  // the ones that do not fit: smallest first
      continue;
    }
    if (!b.fits) continue;
    // Lexicographic: flops, then traffic, then larger micro_batch, then lower stage.
    const auto key = [](const plan::Layout& l) {
      return std::make_tuple(l.flops_ratio, l.dp_traffic_bytes, -l.micro_batch, l.zero);
    };
    CHECK(key(a) <= key(b));
  }
}

TEST_CASE("search: model state as the backends hold it") {
  const config::RunConfig base = search_config();
  const double psi = static_cast<double>(numel(base));
  config::RunConfig cfg = base;
  cfg.precision.compute = "bf16";  // 6 + 4 + 8 bytes per parameter
  const plan::DeviceKind gpu = plan::device_kind("h200", 4), cpu = plan::device_kind("cpu", 4);
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  const model::ParamLayout layout(dims, model::GptShard::whole(dims));
  const auto& units = layout.units();
  const double emb = double(units.front().numel), fin = double(units.back().numel),
               block = double(units[1].numel);
  // cuda: as the cpu (below), plus the 2 MiB pages at the ends of each unit's released ranges
  // (its gradients' one from stage 2; at stage 3 its params' two and its bf16 copy's one) and
  // the largest unit's pages kept for reuse (fp32).
  const double page = 2.0 * (1 << 20), n_units = static_cast<double>(units.size());
  const double pool = 4 * std::max({emb, fin, block});
  for (int stage = 0; stage <= 3; ++stage) {
    const plan::HeldState h = plan::held_state_bytes(cfg, stage, 4, gpu);
    const parallel::ZeroPrediction& p = h.state;
    const parallel::ZeroPrediction c = plan::held_state_bytes(cfg, stage, 4, cpu).state;
    CHECK((h.zero_staging > 0) == (stage > 0));
    CHECK(p.optimizer == Approx(stage >= 1 ? 2 * psi : 8 * psi));
    CHECK(p.optimizer == Approx(c.optimizer));
    CHECK(p.grads == Approx(c.grads + (stage >= 2 ? 2 * n_units * page + pool : 0)));
    CHECK(p.params == Approx(c.params + (stage == 3 ? 6 * n_units * page : 0)));
  }
  // cuda with TRAINER_CUDA_UNMAP=0 keeps the params and grads buffers whole; ZeRO shards the
  // optimizer state (1+) and adds the shard gradient accumulator (2+).
  setenv("TRAINER_CUDA_UNMAP", "bogus", 1);  // refused, as the cuda backend refuses it
  CHECK_THROWS_WITH(plan::device_kind("h200", 4),
                    Catch::Contains("TRAINER_CUDA_UNMAP = 'bogus': allowed are 1"));
  setenv("TRAINER_CUDA_UNMAP", "0", 1);
  const plan::DeviceKind kept = plan::device_kind("h200", 4);
  unsetenv("TRAINER_CUDA_UNMAP");
  CHECK_FALSE(kept.releases_pages);
  CHECK(plan::device_kind("h200", 4).releases_pages);
  for (int stage = 0; stage <= 3; ++stage) {
    const parallel::ZeroPrediction p = plan::held_state_bytes(cfg, stage, 4, kept).state;
    CHECK(p.params == Approx(6 * psi));
    CHECK(p.grads == Approx(4 * psi + (stage >= 2 ? psi : 0)));
    CHECK(p.optimizer == Approx(stage >= 1 ? 2 * psi : 8 * psi));
  }
  // cpu: the formula, plus the whole units stage 2 and 3 keep (embedding + block grads; the
  // gathered params: embedding, final norm and the block in use).
  for (int stage = 0; stage <= 3; ++stage) {
    const parallel::ZeroPrediction formula =
        parallel::predict_zero_memory(stage, numel(cfg), 4, parallel::bytes_per_param("bf16"));
    const parallel::ZeroPrediction p = plan::held_state_bytes(cfg, stage, 4, cpu).state;
    CHECK(p.optimizer == Approx(formula.optimizer));
    CHECK(p.grads == Approx(formula.grads + (stage >= 2 ? 4 * (emb + block) : 0)));
    if (stage < 3) CHECK(p.params == Approx(formula.params));
  }
  // ZeRO 3's params: the most any rank holds of its shard (rank r: [r c, (r + 1) c), the last
  // with the remainder) and the gathered units (the embedding and two adjacent others), each
  // element once, fp32, and the gathered units' bf16 copy; counted element by element here.
  const std::vector<model::UnitRange>& u = units;
  const int dp = 4;
  const int64_t n = numel(cfg), c = n / dp;
  double most = 0;
  for (int r = 0; r < dp; ++r)
    for (size_t k = 1; k + 1 < u.size(); ++k) {
      std::vector<bool> held(static_cast<size_t>(n), false);
      const auto hold = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) held[static_cast<size_t>(i)] = true;
      };
      hold(r * c, r == dp - 1 ? n : (r + 1) * c);
      hold(u[0].offset, u[0].offset + u[0].numel);
      hold(u[k].offset, u[k + 1].offset + u[k + 1].numel);
      const double gathered = double(u[0].numel + u[k].numel + u[k + 1].numel);
      most =
          std::max(most, 4.0 * double(std::count(held.begin(), held.end(), true)) + 2.0 * gathered);
    }
  const double zero3 = plan::held_state_bytes(cfg, 3, dp, cpu).state.params;
  CHECK(zero3 == Approx(most));
  CHECK(zero3 < 6 * psi);
  // a model too small to shard its params at dp 2: all of them at most (the helper's case: the
  // formula's shard plus whole gathered units passed the whole)
  config::RunConfig two_blocks = cfg;
  two_blocks.model.n_layer = 2;
  CHECK(plan::held_state_bytes(two_blocks, 3, 2, cpu).state.params <=
        6.0 * double(numel(two_blocks)));
}

TEST_CASE("search: one replica trains as ZeRO 0, whatever the stage") {
  const config::RunConfig cfg = search_config();
  for (const char* kind : {"cpu", "h100"}) {
    const plan::HeldState zero0 = plan::held_state_bytes(cfg, 0, 1, plan::device_kind(kind, 1));
    for (int stage = 1; stage <= 3; ++stage) {
      const plan::HeldState h = plan::held_state_bytes(cfg, stage, 1, plan::device_kind(kind, 1));
      CHECK(h.total() == zero0.total());
      CHECK(h.zero_staging == 0);
    }
  }
}

TEST_CASE("search: dp traffic per step of the runtime's collectives") {
  const config::RunConfig cfg = search_config();
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  const model::ParamLayout layout(dims, model::GptShard::whole(dims));
  const double psi = double(layout.total_numel());
  const parallel::ZeroUnits u4(layout, 4);
  // Stage 0: a ring all-reduce of the fp32 gradients; stage 1: a reduce-scatter and an
  // all-gather of the equal chunks.
  CHECK(parallel::zero_traffic_bytes(0, u4, 5) == Approx(2 * 3.0 / 4 * 4 * psi));
  CHECK(parallel::zero_traffic_bytes(1, u4, 5) == Approx(2 * 3.0 * 4 * double(u4.shards.chunk())));
  // Stage 2 reduce-scatters every micro-batch (linear in grad_accum), each unit padded to its
  // largest piece, so one pass moves at least the chunks' share; stage 3 adds gathers.
  const double t1 = parallel::zero_traffic_bytes(2, u4, 1),
               t2 = parallel::zero_traffic_bytes(2, u4, 2),
               t3 = parallel::zero_traffic_bytes(2, u4, 3);
  CHECK(t3 - t2 == Approx(t2 - t1));
  CHECK(t2 - t1 >= 3.0 * 4 * double(u4.shards.chunk()));
  CHECK(parallel::zero_traffic_bytes(3, u4, 2) > t2);
  const parallel::ZeroUnits u1(layout, 1);
  for (int stage = 0; stage <= 3; ++stage) CHECK(parallel::zero_traffic_bytes(stage, u1, 5) == 0);
}

TEST_CASE("search: recompute adds the forward FLOPs it reruns") {
  const report::ModelDims d{50257, 1024, 12, 768, 4};
  const double base = report::flops_per_token(d);
  CHECK(report::recompute_flops_per_token(d, "none") == 0);
  // selective reruns attention's QK^T and PV: a third of the formula's 12*L*C*T.
  CHECK(report::recompute_flops_per_token(d, "selective") == Approx(4.0 * 12 * 768 * 1024));
  // full reruns the whole forward of the blocks: the ratio is 8N/6N (4/3) with attention in it.
  const double full = report::recompute_flops_per_token(d, "full");
  CHECK((base + full) / base == Approx(4.0 / 3.0).epsilon(2e-3));
}

TEST_CASE("search: device memory by kind, and the override") {
  CHECK(plan::device_kind("h100", 8).memory_bytes == 81559.0 * 1024 * 1024);
  CHECK(plan::device_kind("h200", 8).memory_bytes == 143771.0 * 1024 * 1024);
  CHECK(plan::device_kind("h200", 8).cuda);
  CHECK(plan::device_kind("h100", 8, 40).memory_bytes == 40.0 * 1024 * 1024 * 1024);
  const plan::DeviceKind one = plan::device_kind("cpu", 1), two = plan::device_kind("cpu", 2);
  CHECK_FALSE(one.cuda);
  CHECK(one.memory_bytes > 0);
  CHECK(two.memory_bytes == Approx(one.memory_bytes / 2));
  CHECK_THROWS(plan::device_kind("tpu", 1));
}

TEST_CASE("search: tp collectives per step, and a rank's tp slice of the activations") {
  config::RunConfig cfg = search_config();
  CHECK(plan::tp_traffic(cfg).collectives == 0);  // tp 1
  const size_t whole = plan::activation_bytes(cfg, cfg.train.micro_batch, "none", false);
  cfg.parallel.tp = 2;
  cfg.train.grad_accum = 3;
  const double elements = double(cfg.train.micro_batch) * cfg.model.seq_len * cfg.model.d_model;
  const int64_t L = cfg.model.n_layer;
  // per micro-batch, besides the blocks': the embedding's output and the head's input gradient
  // all-reduced, and the cross-entropy's statistics (3 floats per row) gathered
  const double rows = double(cfg.train.micro_batch) * cfg.model.seq_len, stats = rows * 12;
  plan::TpTraffic t = plan::tp_traffic(cfg);
  CHECK(t.collectives == 3 * (4 * L + 3));
  CHECK(t.sent_bytes == Approx(3 * ((4 * L + 2) * elements * 4 + stats)));  // 2 (tp-1)/tp = 1
  cfg.activation_checkpointing = "full";
  CHECK(plan::tp_traffic(cfg).collectives == 3 * (6 * L + 3));
  cfg.parallel.tp = 4;
  CHECK(plan::tp_traffic(cfg).sent_bytes ==
        Approx(3 * (1.5 * (6 * L + 2) * elements * 4 + 3 * stats)));
  // Sequence parallelism: reduce-scatters and all-gathers (fp32 here), the layernorms gathered
  // again in backward; at the ends the embedding's output scattered and its gradient gathered,
  // the final norm's output gathered and its gradient scattered, and the statistics gathered.
  cfg.parallel.tp = 2;
  cfg.activation_checkpointing = "none";
  cfg.parallel.sequence_parallel = true;
  t = plan::tp_traffic(cfg);
  CHECK(t.collectives == 3 * (10 * L + 5));
  CHECK(t.sent_bytes == Approx(3 * ((10 * L + 4) * elements * 4 * 0.5 + stats)));
  cfg.parallel.sequence_parallel = false;
  // The activations a tp 2 rank holds are fewer than the whole model's (the residual stream and
  // norms stay whole), and fewer again with sequence parallelism.
  const size_t slice = plan::activation_bytes(cfg, cfg.train.micro_batch, "none", false);
  CHECK(slice < whole);
  CHECK(slice > whole / 2);
  cfg.parallel.sequence_parallel = true;
  CHECK(plan::activation_bytes(cfg, cfg.train.micro_batch, "none", false) < slice);
}

TEST_CASE("search: over the devices, tp and sequence parallelism keep the global batch") {
  config::RunConfig cfg = search_config();  // 4 heads, 12 sequences per rank
  const int devices = 4;
  plan::SearchRequest r{cfg, devices, plan::device_kind("a100", devices), 0.9, true, devices};
  const auto all = plan::search_layouts(r);
  std::set<std::tuple<int, bool>> seen;
  for (const plan::Layout& l : all) {
    seen.insert({l.tp, l.sequence_parallel});
    CHECK(l.tp * l.dp == devices);
    CHECK(int64_t{l.micro_batch} * l.grad_accum * l.dp == 12 * devices);
    CHECK((l.tp > 1 || !l.sequence_parallel));
  }
  CHECK(seen ==
        std::set<std::tuple<int, bool>>{{1, false}, {2, false}, {2, true}, {4, false}, {4, true}});
  // With room for everything, tp 1 ranks first (at the same FLOPs, a smaller tp comes first).
  REQUIRE(all.front().fits);
  CHECK(all.front().tp == 1);
  // With the memory of tp 2 + sp's smallest layout without recompute, a tp > 1 layout without
  // recompute comes first (tp 1 fits there only with recompute, if at all).
  double smallest_tp2 = 1e30;
  for (const plan::Layout& l : all)
    if (l.tp == 2 && l.sequence_parallel && l.activation_checkpointing == "none")
      smallest_tp2 = std::min(smallest_tp2, l.total());
  double smallest_tp1 = 1e30;
  for (const plan::Layout& l : all)
    if (l.tp == 1 && l.activation_checkpointing == "none")
      smallest_tp1 = std::min(smallest_tp1, l.total());
  REQUIRE(smallest_tp2 < smallest_tp1);
  r.device = plan::device_kind("a100", devices, smallest_tp2 / 0.9 / (1024.0 * 1024 * 1024));
  const auto tight = plan::search_layouts(r);
  REQUIRE(tight.front().fits);
  CHECK(tight.front().tp > 1);
  CHECK(tight.front().flops_ratio == 1.0);
  // A tp that does not divide the heads is not tried; nor past 8 on GPUs (a node).
  cfg.model.n_head = 3;
  cfg.model.d_model = 48;
  for (const plan::Layout& l :
       plan::search_layouts({cfg, 12, plan::device_kind("cpu", 12), 0.9, false, 12}))
    CHECK((l.tp == 1 || l.tp == 3));
  cfg.model.n_head = 16;
  cfg.model.d_model = 64;
  std::set<int> gpu_tps;
  for (const plan::Layout& l :
       plan::search_layouts({cfg, 16, plan::device_kind("h100", 16), 0.9, true, 16}))
    gpu_tps.insert(l.tp);
  CHECK(gpu_tps == std::set<int>{1, 2, 4, 8});
}

TEST_CASE("search: a context-parallel config keeps its cp; ZeRO shards over dp x cp") {
  config::RunConfig cfg = search_config();  // 3 layers, 12 sequences per dp rank, seq_len 32
  cfg.parallel.cp = 2;
  const int devices = 8, dp = devices / 2;  // the config's: tp 1, pp 1
  const plan::DeviceKind device = plan::device_kind("cpu", devices);
  const auto all = plan::search_layouts({cfg, dp, device, 0.9, false, devices});
  std::set<std::tuple<int, bool, int>> splits;
  int configs = 0;
  for (const plan::Layout& l : all) {
    INFO("tp " << l.tp << " sp " << l.sequence_parallel << " pp " << l.pp << " dp " << l.dp
               << " zero " << l.zero << " micro_batch " << l.micro_batch);
    splits.insert({l.tp, l.sequence_parallel, l.dp});
    CHECK(l.tp * l.pp * l.dp * 2 == devices);
    CHECK(int64_t{l.micro_batch} * l.grad_accum * l.dp == 12 * dp);  // the global batch kept
    configs += l.is_config;
    if (l.pp != 1) continue;
    // the model state of a rank whose ZeRO shards over its dp x cp replicas, and its
    // activations at cp 2 (T / 2 tokens of each sequence, the whole sequence's keys)
    config::RunConfig c = cfg;
    c.parallel.tp = l.tp;
    c.parallel.sequence_parallel = l.sequence_parallel;
    CHECK(l.held.total() == plan::held_state_bytes(c, l.zero, l.dp * 2, device).total());
    CHECK(l.activations ==
          double(plan::activation_bytes(c, l.micro_batch, l.activation_checkpointing, false)));
  }
  CHECK(configs == 1);
  // tp 1 (dp 4), tp 2 with and without sequence parallelism (dp 2), tp 4 (dp 1; 16 tokens a
  // cp rank: sequence parallelism over 4 too)
  CHECK(splits == std::set<std::tuple<int, bool, int>>{
                      {1, false, 4}, {2, false, 2}, {2, true, 2}, {4, false, 1}, {4, true, 1}});
  // ZeRO 1 over dp 4 x cp 2 = 8 replicas holds less than over the dp 4 alone would
  CHECK(plan::held_state_bytes(cfg, 1, 8, device).total() <
        plan::held_state_bytes(cfg, 1, 4, device).total());
  // On a GPU the flash kernels keep each of a cp rank's 16 rows' log-sum-exp, not its
  // probabilities over the sequence's 32 keys: per block (recompute none: one state each) and head
  const size_t probabilities = plan::activation_bytes(cfg, 4, "none", false),
               flash = plan::activation_bytes(cfg, 4, "none", true);
  CHECK(probabilities - flash == size_t{3} * 4 * 4 * 16 * (32 - 1) * 4);
}

TEST_CASE("search: pipeline layouts run one schedule per step, ranked by their bubble") {
  // One head: tp cannot split this model, pp (dividing its 4 layers) can.
  config::RunConfig cfg = testing::small_train_config(/*vocab=*/64, /*seq_len=*/32,
                                                      /*n_layer=*/4, /*d_model=*/48,
                                                      /*n_head=*/1);
  cfg.train.micro_batch = 4;
  cfg.train.grad_accum = 3;  // 12 sequences per rank at dp 4
  const int devices = 4;
  plan::SearchRequest r{cfg, devices, plan::device_kind("a100", devices), 0.9, true, devices};
  const auto all = plan::search_layouts(r);
  std::set<int> pps;
  for (const plan::Layout& l : all) {
    pps.insert(l.pp);
    CHECK(l.tp == 1);
    CHECK(l.tp * l.pp * l.dp == devices);
    CHECK(int64_t{l.micro_batch} * l.grad_accum * l.dp == 12 * devices);
    if (l.pp == 1) {
      CHECK(l.bubble == 0);
      continue;
    }
    CHECK(l.grad_accum == 1);  // the stage's micro-batch is all of its sequences
    CHECK(l.micro_batch % l.pieces == 0);
    CHECK(l.zero <= 1);
    CHECK(l.bubble == Approx(double(l.pp - 1) / (l.pieces + l.pp - 1)));
  }
  CHECK(pps == std::set<int>{1, 2, 4});
  // With room for everything, no pipeline: its bubble costs what recompute would not.
  REQUIRE(all.front().fits);
  CHECK(all.front().pp == 1);
  CHECK(all.front().flops_ratio == 1.0);
  // With the memory of the smallest pp 2 layout without recompute (pieces of one sequence), a
  // pipeline layout without recompute comes first, with the most pieces (the smallest bubble)
  // among those that fit.
  double smallest_pp2 = 1e30;
  for (const plan::Layout& l : all)
    if (l.pp == 2 && l.activation_checkpointing == "none")
      smallest_pp2 = std::min(smallest_pp2, l.total());
  r.device = plan::device_kind("a100", devices, smallest_pp2 / 0.9 / (1024.0 * 1024 * 1024));
  const auto tight = plan::search_layouts(r);
  REQUIRE(tight.front().fits);
  INFO("best: pp " << tight.front().pp << ", pieces " << tight.front().pieces << ", recompute "
                   << tight.front().activation_checkpointing << ", total " << tight.front().total()
                   << " of " << smallest_pp2);
  CHECK(tight.front().pp == 2);
  CHECK(tight.front().activation_checkpointing == "none");
  CHECK(tight.front().pieces == tight.front().micro_batch);
  // The heaviest stage's numbers: what plan says for that layout's config.
  config::RunConfig best = cfg;
  best.parallel.pp = 2;
  best.parallel.dp = tight.front().dp;
  best.parallel.zero = tight.front().zero;
  best.train.micro_batch = tight.front().micro_batch;
  best.train.grad_accum = 1;
  best.parallel.pipeline.microbatches = tight.front().pieces;
  const int stage =
      plan::heaviest_stage(best, best.parallel.zero, best.parallel.dp, r.device, true);
  CHECK(tight.front().activations ==
        double(plan::activation_bytes(best, best.train.micro_batch, "none", true, stage)));
  // fp8 pipelines as bf16 does (a stage's schedule is one amax bracket: Gpt::begin_fp8_amaxes).
  cfg.precision.compute = "fp8";
  bool pipelined = false;
  for (const plan::Layout& l :
       plan::search_layouts({cfg, devices, plan::device_kind("h100", devices), 0.9, true, devices}))
    pipelined = pipelined || l.pp > 1;
  CHECK(pipelined);
}

TEST_CASE(
    "search: a mixture of experts keeps its ep (any ZeRO stage), tp > 1 with "
    "sequence parallelism and whole sequences per tp rank",
    "[moe]") {
  config::RunConfig cfg = search_config();
  cfg.model.moe.num_experts = 4;
  const int devices = 4;
  auto layouts = [&] {
    return plan::search_layouts(
        {cfg, devices, plan::device_kind("a100", devices), 0.9, true, devices});
  };
  std::set<int> zeros, tps;
  auto tp_rule = [](const plan::Layout& l) {
    if (l.tp == 1) return true;
    const int sequences = l.pp > 1 ? l.micro_batch / l.pieces : l.micro_batch;
    return l.sequence_parallel && sequences % l.tp == 0;
  };
  for (const plan::Layout& l : layouts()) {
    INFO("tp " << l.tp << " sp " << l.sequence_parallel << " pp " << l.pp << " micro_batch "
               << l.micro_batch << " pieces " << l.pieces);
    CHECK(tp_rule(l));
    zeros.insert(l.zero);
    tps.insert(l.tp);
  }
  CHECK(zeros == std::set<int>{0, 1, 2, 3});  // ep 1: the experts are plain replicas
  CHECK(tps.count(2) == 1);
  cfg.parallel.ep = 2;
  const auto ep = layouts();
  REQUIRE(!ep.empty());
  zeros.clear();
  for (const plan::Layout& l : ep) {
    CHECK(tp_rule(l));
    zeros.insert(l.zero);
    CHECK(l.dp % 2 == 0);
  }
  CHECK(zeros == std::set<int>{0, 1, 2, 3});
  // each rank holds half of the experts: less model state than at ep 1, same activations
  config::RunConfig one = cfg;
  one.parallel.ep = 1;
  const auto rank_state = [](const config::RunConfig& c) {
    return plan::rank_layout(c).total_numel();
  };
  CHECK(rank_state(cfg) < rank_state(one));
  // dp traffic: the experts' gradients over the 2 ranks that hold them, the rest over dp 4
  const model::ParamLayout layout = plan::rank_layout(cfg);
  int64_t experts = 0;
  for (const auto& p : layout.params()) experts += p.expert ? p.numel : 0;
  REQUIRE(experts > 0);
  const double dense = static_cast<double>(layout.total_numel() - experts);
  CHECK(plan::dp_traffic_bytes(cfg, layout, 0, 4, 1) ==
        Approx(2 * 4 * (0.75 * dense + 0.5 * static_cast<double>(experts))));
  for (const plan::Layout& l : ep)
    if (l.pp == 1 && l.dp == 4)
      CHECK(l.dp_traffic_bytes == plan::dp_traffic_bytes(cfg, layout, l.zero, 4, l.grad_accum));
  // ZeRO 1: each dense run reduce-scattered and gathered over dp 4, each expert run over its 2
  // replicas (a whole number of elements per rank: within the remainders of the cut); and the
  // optimizer state of a quarter of the dense tensors and half of the experts
  CHECK(plan::dp_traffic_bytes(cfg, layout, 1, 4, 1) ==
        Approx(2 * 4 * (0.75 * dense + 0.5 * static_cast<double>(experts))).epsilon(1e-3));
  const plan::HeldState z1 = plan::held_state_bytes(cfg, 1, 4, plan::device_kind("a100", 4));
  CHECK(z1.state.optimizer ==
        Approx(8 * (dense / 4 + static_cast<double>(experts) / 2)).epsilon(1e-3));
  CHECK(z1.state.optimizer <
        plan::held_state_bytes(cfg, 0, 4, plan::device_kind("a100", 4)).state.optimizer / 2);
  // ZeRO 2: the same optimizer state, and fewer gradients (an accumulator of the owned shards,
  // and the units in flight: on cuda their 2 MiB pages); per micro-batch a reduce-scatter of
  // each block's parts
  const plan::HeldState z2 = plan::held_state_bytes(cfg, 2, 4, plan::device_kind("a100", 4));
  const plan::HeldState z2_cpu = plan::held_state_bytes(cfg, 2, 4, plan::device_kind("cpu", 4));
  CHECK(z2.state.optimizer == z1.state.optimizer);
  CHECK(z2_cpu.state.grads < z1.state.grads);
  // (cuda: at least a page at each end of each unit's parts, one or more per unit)
  CHECK(z2.state.grads >
        z2_cpu.state.grads + 2 * static_cast<double>(layout.units().size()) * 2 * (1 << 20));
  // (the parts' reduce-scatters pad each part's pieces to its largest: at least the segments')
  const double t1 = plan::dp_traffic_bytes(cfg, layout, 2, 4, 1),
               t2 = plan::dp_traffic_bytes(cfg, layout, 2, 4, 2),
               gathers = plan::dp_traffic_bytes(cfg, layout, 1, 4, 1) / 2;
  CHECK(t2 - t1 == Approx(t1 - gathers));  // a micro-batch more: its scatters, again
  CHECK(t1 - gathers >= gathers);
}

TEST_CASE("ep traffic: the kept rows, the fewer of the experts' slots and the top_k choices") {
  // 4 experts, top_k 2, 3 layers, 4 sequences of 32 tokens, ep 2, fp32: per block a forward's
  // rows out (4 B) and back (4 B), and backward's two (4 B each), half of them to the other rank
  config::RunConfig cfg = testing::small_train_config(64, 32, 3, 48, 4);
  cfg.model.moe.num_experts = 4;
  cfg.model.moe.top_k = 2;
  cfg.parallel.ep = 2;
  cfg.train.micro_batch = 4;
  const auto bytes_of = [&](int64_t rows) { return 3.0 * double(rows) * 48 * 0.5 * 16; };
  // capacity 1.25: ceil(1.25 * 32 * 2 / 4) = 20 slots an expert a sequence, 320 in all; the 256
  // choices are fewer
  cfg.model.moe.capacity_factor = 1.25;
  CHECK(plan::ep_traffic(cfg).sent_bytes == bytes_of(256));
  CHECK(plan::ep_traffic(cfg).collectives == 3 * 4);
  // capacity 0.5: 8 slots, 128 in all, fewer than the choices
  cfg.model.moe.capacity_factor = 0.5;
  CHECK(plan::ep_traffic(cfg).sent_bytes == bytes_of(128));
  // dropless: the choices
  cfg.model.moe.capacity_factor = std::numeric_limits<double>::infinity();
  CHECK(plan::ep_traffic(cfg).sent_bytes == bytes_of(256));
}

// The bytes the busiest rank sends between stages per step: a piece's boundary activations
// (micro_batch x seq_len x d_model fp32 over the step's grad_accum micro-batches) once per
// transfer. At pp 2 stage 0 only sends activations and stage 1 only gradients; a middle stage
// (pp 4) sends both; under the interleaved schedule each of a stage's chunks sends, but the
// model's first chunk sends no gradient and its last no activation.
TEST_CASE("plan: bytes sent between pipeline stages by the busiest rank") {
  config::RunConfig cfg = search_config();
  cfg.model.n_layer = 8;
  cfg.train.micro_batch = 4;
  cfg.train.grad_accum = 2;
  const double step = 2.0 * 4 * cfg.model.seq_len * cfg.model.d_model * 4;  // one way, one chunk
  CHECK(plan::pp_sent_bytes(cfg) == 0);
  cfg.parallel.pp = 2;
  CHECK(plan::pp_sent_bytes(cfg) == step);
  cfg.parallel.pp = 4;
  CHECK(plan::pp_sent_bytes(cfg) == 2 * step);
  cfg.parallel.pp = 2;
  cfg.parallel.pipeline.schedule = "interleaved";
  cfg.parallel.pipeline.virtual_stages = 2;
  CHECK(plan::pp_sent_bytes(cfg) == 3 * step);
  cfg.parallel.pp = 4;
  CHECK(plan::pp_sent_bytes(cfg) == 4 * step);
}

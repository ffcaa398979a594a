#include "runtime/plan/layout_search.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

#include "runtime/core/attention_state.h"
#include "runtime/core/env_switch.h"
#include "runtime/model/activations.h"
#include "runtime/model/param_layout.h"
#include "runtime/parallel/pipeline_runner.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/parallel/zero_layout.h"
#include "runtime/report/flops.h"
#include "runtime/report/report_from_config.h"

namespace trainer::plan {

namespace {

constexpr double kMiB = 1024.0 * 1024.0, kGiB = kMiB * 1024.0;

}  // namespace

double dp_traffic_bytes(const config::RunConfig& cfg, const model::ParamLayout& layout, int zero,
                        int dp, int grad_accum) {
  if (dp <= 1) return 0;
  // (under expert parallelism each dense run over dp, each expert run over edp: ZeroUnits'
  // segments)
  const int ep = cfg.parallel.ep;
  return parallel::zero_traffic_bytes(parallel::zero_shards_state(zero, dp) ? zero : 0,
                                      parallel::ZeroUnits(layout, dp, ep > 1 ? dp / ep : 0),
                                      grad_accum);
}

model::ParamLayout rank_layout(const config::RunConfig& cfg, int stage) {
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  model::GptShard shard = model::GptShard::stage(dims, stage, cfg.parallel.pp, 0, cfg.parallel.tp,
                                                 cfg.parallel.sequence_parallel,
                                                 config::virtual_stages_of(cfg.parallel));
  shard.cp_size = cfg.parallel.cp;  // (every cp rank holds the same tensors)
  shard.ep_size = cfg.parallel.ep;  // (and every ep rank as many experts)
  return model::ParamLayout(dims, shard);
}

int64_t smallest_rank_numel(const config::RunConfig& cfg) {
  int64_t fewest = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < cfg.parallel.pp; ++s)
    fewest = std::min(fewest, rank_layout(cfg, s).total_numel());
  return fewest;
}

namespace {

// Ranking key: smaller is better (see layout_search.h).
auto rank_key(const Layout& l) {
  return std::make_tuple(!l.fits, l.fits ? l.flops_ratio / (1 - l.bubble) : l.total(),
                         l.fits ? l.tp : 0, l.fits ? l.pp : 0, l.fits ? l.dp_traffic_bytes : 0.0,
                         -l.micro_batch, l.zero, !l.sequence_parallel);
}

// A model split to try: tp (with or without sequence parallelism) and pp.
struct ModelSplit {
  int tp = 1;
  bool sp = false;
  int pp = 1;
};

// The splits to try: see SearchRequest::devices (and the config's own without it).
std::vector<ModelSplit> split_candidates(const SearchRequest& r) {
  const config::RunConfig& cfg = r.cfg;
  const bool config_sp = cfg.parallel.tp > 1 && cfg.parallel.sequence_parallel;
  if (r.devices <= 0) return {{cfg.parallel.tp, config_sp, cfg.parallel.pp}};
  const int64_t global = int64_t{cfg.train.micro_batch} * cfg.train.grad_accum * r.dp;
  const int cp = cfg.parallel.cp;  // (kept as configured)
  std::vector<ModelSplit> out;
  for (int t = 1; t <= r.devices; ++t)
    for (int p = 1; p <= cfg.model.n_layer && t * p * cp <= r.devices; ++p) {
      if (r.devices % (t * p * cp) != 0 || cfg.model.n_layer % p != 0) continue;
      const int dp = r.devices / (t * p * cp);
      if (cfg.model.n_head % t != 0 || (int64_t{cfg.model.d_model} * cfg.model.ffn_mult) % t != 0 ||
          cfg.model.padded_vocab_size() % t != 0 || global % dp != 0 || (r.device.cuda && t > 8))
        continue;
      // a mixture of experts keeps its ep groups within dp, and at tp > 1 runs with sequence
      // parallelism (config::check_runnable)
      const bool moe = cfg.model.moe.num_experts > 0;
      if (moe && (dp * cp) % cfg.parallel.ep != 0) continue;  // (ep reuses the dp x cp ranks)
      if (!moe || t == 1) out.push_back({t, false, p});
      if (t > 1 && (cfg.model.seq_len / cp) % t == 0) out.push_back({t, true, p});
    }
  return out;
}

// Under pipeline parallelism: the pieces in flight on the layout's stage, each of
// micro_batch / microbatches sequences (parallel::PipelineRunner), one scratch among them.
size_t activation_bytes_of(const model::ParamLayout& layout, const config::RunConfig& cfg,
                           int micro_batch, const std::string& activation_checkpointing,
                           bool flash_attention) {
  const model::GptShard& shard = layout.shard();
  const int T = cfg.model.seq_len / shard.cp_size;  // this rank's tokens of each sequence
  const bool bf16 = cfg.precision.compute != "fp32", fp8 = cfg.precision.compute == "fp8";
  const int pp = cfg.parallel.pp, micros = pp > 1 ? cfg.parallel.pipeline.microbatches : 1;
  const int rows = micro_batch / micros;
  const int64_t heads = layout.dims().n_head / shard.tp_size;
  // (context parallelism: the row log-sum-exp of this rank's T rows with flash kernels, else the
  // probabilities over the whole sequence, as Backend::attention_cp_state_shape)
  const Shape attention_state = shard.cp_size > 1 && !flash_attention
                                    ? Shape{rows, heads, T, cfg.model.seq_len}
                                    : attention_state_shape_of(flash_attention, rows, heads, T);
  const int stage = shard.first_layer / std::max(1, shard.layers_per_chunk());
  const parallel::PipeSchedule schedule =
      parallel::parse_pipe_schedule(cfg.parallel.pipeline.schedule);
  // the slots (parallel::PipelineRunner): the plain ones, then those with the head's tensors
  parallel::PipeSlots slots;
  slots.head = 1;
  if (pp > 1)
    slots = parallel::activation_slots(
        parallel::pipeline_steps(schedule, stage, pp, micros, shard.chunks),
        parallel::head_chunk_of(stage, pp, shard.chunks), micros, shard.chunks);
  auto bytes = [&](bool own_scratch, bool with_head) {
    return model::Activations::bytes_needed(
        layout, rows, T, model::parse_recompute(activation_checkpointing),
        bf16 ? DType::bf16 : DType::f32, attention_state, fp8, own_scratch, with_head);
  };
  // the later slots share the first one's scratch (model::Gpt::allocate_activations)
  size_t sum = 0;
  for (int i = 0; i < slots.plain + slots.head; ++i) sum += bytes(i == 0, i >= slots.plain);
  // the interleaved schedule's inbox for an output gradient, a stage output's size (fp32)
  if (schedule == parallel::PipeSchedule::interleaved && pp > 1)
    sum += static_cast<size_t>(rows) * T * layout.dims().d_model /
           (shard.sequence_parallel ? shard.tp_size : 1) * 4;
  return sum;
}

HeldState held_state_of(const model::ParamLayout& layout, const config::RunConfig& cfg, int zero,
                        int dp, const DeviceKind& device) {
  if (!parallel::zero_shards_state(zero, dp)) zero = 0;
  const int edp = cfg.parallel.ep > 1 ? dp / cfg.parallel.ep : 0;  // (0: no expert parallelism)
  const parallel::ZeroUnits units(layout, dp, edp);
  const std::vector<parallel::Range>& r = units.unit_range;
  parallel::LiveUnits live;
  live.embedding = r.front().size();
  live.final_norm = r.back().size();
  for (size_t u = 1; u + 1 < r.size(); ++u)
    live.largest_block = std::max(live.largest_block, r[u].size());
  HeldState h;
  const parallel::BytesPerParam b = parallel::bytes_per_param(cfg.precision.compute);
  h.state =
      parallel::predict_held_state(zero, units.shards.numel(), dp, b, device.releases_pages, live);
  if (zero == 3 && device.releases_pages && edp == 0) {
    // the most any rank holds: its shard beside the gathered units, less what they share (the
    // formula's shard plus whole gathered units counts that twice, and can pass the whole)
    const parallel::Zero3Params z = parallel::zero3_peak_params(units);
    h.state.params = 4.0 * static_cast<double>(z.held) +
                     (b.params - 4) * static_cast<double>(z.gathered);  // (the bf16 copy's)
  }
  if (zero > 0 && edp > 0) {
    // under expert parallelism a rank owns a shard of each segment (the dense runs' over dp, the
    // expert runs' over edp), not 1/dp of the buffer: their optimizer state, from stage 2 their
    // gradient accumulator, at stage 3 (where pages go back) their params (the first rank's
    // shards: the last ones also own a remainder < group)
    // A segment on one rank (experts at edp 1) keeps its gradients in place, whole.
    double owned = 0, accumulated = 0, in_place = 0;
    for (const parallel::ZeroSegment& s : units.segments) {
      owned += static_cast<double>(s.shards.chunk());
      (s.sharded() ? accumulated : in_place) += static_cast<double>(s.shards.chunk());
    }
    h.state.optimizer = b.optimizer * owned;
    const double formula = static_cast<double>(units.shards.numel()) / dp;  // its N / dp
    if (zero >= 2) h.state.grads += b.grads * (accumulated - formula + in_place);
    if (zero == 3)  // (at most the whole, as without expert parallelism)
      h.state.params = std::min(h.state.params + b.params * (owned - formula),
                                b.params * static_cast<double>(units.shards.numel()));
  }
  if (device.cuda && device.releases_pages && zero >= 2) {
    // The cuda backend hands back whole 2 MiB pages (ReleasableMemory; the cpu backend's 4 KiB
    // pages are below these figures' precision): a released range keeps the pages at its two
    // ends. Per part of a unit (one per segment it meets), the gradients' one range (stage 2 and
    // up), and at stage 3 the params' two (either side of this rank's piece); per unit the bf16
    // copy's one. And unmapped pages kept for reuse: as many as the largest unit's.
    const double page = 2.0 * (1 << 20), n_units = static_cast<double>(r.size());
    double parts = 0;
    units.for_each_unit_part([&](size_t, parallel::Range) { parts += 1; });
    const double largest_unit =
        4.0 * static_cast<double>(std::max({live.embedding, live.largest_block, live.final_norm}));
    h.state.grads += 2 * parts * page + largest_unit;
    if (zero == 3)
      h.state.params +=
          4 * parts * page + (cfg.precision.compute == "fp32" ? 0 : 2 * n_units * page);
  }
  if (zero > 0)
    h.zero_staging = 4.0 * static_cast<double>(parallel::zero_staging_floats(zero, units));
  return h;
}

// The divisors of n in increasing order (n <= 2^40 by config::validate's bounds on tokens per
// step, so the square root is at most 2^20 trials).
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// Pipeline layouts of `cfg` (its tp, sp and pp set) at `dp`: a stage's micro-batch is all of the
// dp rank's `per_rank` sequences (one schedule per step), cut into pieces of each size that
// divides them; ZeRO 0 and 1; every recompute mode. The numbers per rank are the heaviest
// stage's (the first or the last).
void search_pipeline(const SearchRequest& request, config::RunConfig cfg, int dp, int64_t per_rank,
                     double base_flops, const report::ModelDims& fd, double usable,
                     std::vector<Layout>& out) {
  if (per_rank > std::numeric_limits<int>::max()) return;
  const int pp = cfg.parallel.pp;
  const bool moe_tp = cfg.model.moe.num_experts > 0 && cfg.parallel.tp > 1;
  // (1F1B for the interleaved schedule too: ranking its virtual stages would need the time of
  // their extra exchanges, which the search does not model)
  if (cfg.parallel.pipeline.schedule != "gpipe") cfg.parallel.pipeline.schedule = "1f1b";
  cfg.train.micro_batch = static_cast<int>(per_rank);
  cfg.train.grad_accum = 1;
  const config::RunConfig& asked = request.cfg;
  const bool config_sp = asked.parallel.tp > 1 && asked.parallel.sequence_parallel;
  const int replicas = dp * cfg.parallel.cp;  // ZeRO's group and the gradients' (dp x cp)
  std::vector<int> stages = {0, 1};
  if (replicas == 1) stages = {0};
  for (const int zero : stages) {
    // the end stages' model state and dp traffic (the pieces do not change them); the middle
    // stages hold less than the first
    struct End {
      int stage;
      HeldState held;
      double dp_traffic = 0;
    };
    std::vector<End> ends;
    for (const int stage : {0, pp - 1}) {
      End e{stage, held_state_bytes(cfg, zero, replicas, request.device, stage)};
      if (replicas > 1)
        e.dp_traffic = dp_traffic_bytes(cfg, rank_layout(cfg, stage), zero, replicas, 1);
      ends.push_back(e);
    }
    for (const int64_t rows : divisors(per_rank)) {
      if (moe_tp && rows % cfg.parallel.tp != 0) continue;  // each tp rank routes whole sequences
      cfg.parallel.pipeline.microbatches = static_cast<int>(per_rank / rows);
      for (const char* recompute : {"none", "selective", "full"}) {
        Layout l;
        l.tp = cfg.parallel.tp;
        l.dp = dp;
        l.pp = pp;
        l.pieces = cfg.parallel.pipeline.microbatches;
        l.bubble = parallel::bubble_fraction(pp, l.pieces);
        l.sequence_parallel = cfg.parallel.sequence_parallel;
        l.zero = zero;
        l.micro_batch = cfg.train.micro_batch;
        l.grad_accum = 1;
        l.activation_checkpointing = recompute;
        for (const End& e : ends) {  // the heavier end's numbers
          const double activations = static_cast<double>(
              activation_bytes(cfg, l.micro_batch, recompute, request.flash_attention, e.stage));
          if (e.held.total() + activations <= l.total()) continue;
          l.held = e.held;
          l.activations = activations;
          l.dp_traffic_bytes = e.dp_traffic;
        }
        l.fits = l.total() <= usable;
        l.flops_ratio =
            (base_flops + report::recompute_flops_per_token(fd, recompute)) / base_flops;
        l.is_config = l.tp == asked.parallel.tp && l.sequence_parallel == config_sp &&
                      pp == asked.parallel.pp && zero == asked.parallel.zero &&
                      l.micro_batch == asked.train.micro_batch &&
                      l.pieces == asked.parallel.pipeline.microbatches &&
                      l.activation_checkpointing == asked.activation_checkpointing &&
                      config::virtual_stages_of(asked.parallel) == 1;  // (no interleaved rows)
        out.push_back(l);
      }
    }
  }
}

}  // namespace

DeviceKind device_kind(const std::string& name, int ranks, double memory_gib) {
  DeviceKind d{name, 0, name != "cpu"};
  if (d.cuda) try {
      d.releases_pages = cuda_unmap_from_env();  // as the cuda backend reads it
    } catch (const std::invalid_argument& e) {
      throw config::ConfigError(e.what());
    }
  if (name == "h100")
    d.memory_bytes = 81559 * kMiB;
  else if (name == "h200")
    d.memory_bytes = 143771 * kMiB;
  else if (name == "a100")
    d.memory_bytes = 81920 * kMiB;
  else if (name == "cpu")
    d.memory_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                     static_cast<double>(sysconf(_SC_PAGESIZE)) / std::max(ranks, 1);
  else
    throw std::invalid_argument("unknown device kind '" + name + "'");
  if (memory_gib > 0) d.memory_bytes = memory_gib * kGiB;
  return d;
}

size_t activation_bytes(const config::RunConfig& cfg, int micro_batch,
                        const std::string& activation_checkpointing, bool flash_attention,
                        int stage) {
  return activation_bytes_of(rank_layout(cfg, stage), cfg, micro_batch, activation_checkpointing,
                             flash_attention);
}

int heaviest_stage(const config::RunConfig& cfg, int zero, int dp, const DeviceKind& device,
                   bool flash_attention) {
  int best = 0;
  double most = -1;
  for (int s = 0; s < cfg.parallel.pp; ++s) {
    const double bytes =
        held_state_bytes(cfg, zero, dp, device, s).total() +
        static_cast<double>(activation_bytes(cfg, cfg.train.micro_batch,
                                             cfg.activation_checkpointing, flash_attention, s));
    if (bytes > most) best = s, most = bytes;
  }
  return best;
}

double pp_sent_bytes(const config::RunConfig& cfg) {
  if (cfg.parallel.pp <= 1) return 0;
  const int rows_of = cfg.parallel.sequence_parallel ? cfg.parallel.tp : 1;
  const int v = config::virtual_stages_of(cfg.parallel);
  // per micro-batch of pieces, both directions together
  const int transfers = cfg.parallel.pp > 2 ? 2 * v : 2 * v - 1;
  return 1.0 * transfers * cfg.train.grad_accum * cfg.train.micro_batch * cfg.model.seq_len /
         cfg.parallel.cp * cfg.model.d_model * 4 / rows_of;
}

CpTraffic cp_traffic(const config::RunConfig& cfg) {
  CpTraffic t;
  const int cp = cfg.parallel.cp;
  if (cp <= 1) return t;
  // per micro-batch and block: qkv gathered in forward, in a recompute and again in backward,
  // and its gradient reduce-scattered (fp32); a ring sends (cp - 1) ranks' parts of each
  const std::string& ac = cfg.activation_checkpointing;
  const double gathers = ac == "none" ? 2 : 3, L = cfg.model.n_layer / cfg.parallel.pp,
               part = double(cfg.train.micro_batch) * (cfg.model.seq_len / cp) * 3 *
                      cfg.model.d_model / cfg.parallel.tp,
               mm = cfg.precision.compute == "fp32" ? 4 : 2;
  t.collectives = static_cast<int64_t>((gathers + 1) * L) * cfg.train.grad_accum;
  t.sent_bytes = cfg.train.grad_accum * L * (cp - 1) * part * (gathers * mm + 4);
  return t;
}

EpTraffic ep_traffic(const config::RunConfig& cfg) {
  EpTraffic t;
  const int ep = cfg.parallel.ep;
  if (ep <= 1 || cfg.model.moe.num_experts == 0) return t;
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  // (at tp > 1, with sequence parallelism, each tp rank routes B / tp whole sequences)
  const int B = cfg.train.micro_batch / cfg.parallel.tp, T = cfg.model.seq_len / cfg.parallel.cp;
  // the kept rows: at most one buffer block at ep 1, the fewer of the experts' slots and the
  // top_k choices
  const double rows = static_cast<double>(dims.expert_block_rows(B, T, cfg.model.seq_len, 1));
  const double forwards = cfg.activation_checkpointing == "full" ? 2 : 1,
               L = cfg.model.n_layer / cfg.parallel.pp,
               mm = cfg.precision.compute == "fp32" ? 4 : 2;
  t.collectives = static_cast<int64_t>((2 * forwards + 2) * L) * cfg.train.grad_accum;
  t.sent_bytes = cfg.train.grad_accum * L * rows * dims.d_model * (ep - 1) / ep *
                 (forwards * (mm + 4) + mm + 4);
  return t;
}

TpTraffic tp_traffic(const config::RunConfig& cfg) {
  TpTraffic t;
  const int tp = cfg.parallel.tp;
  if (tp <= 1) return t;
  const bool full = cfg.activation_checkpointing == "full", sp = cfg.parallel.sequence_parallel;
  const int pp = cfg.parallel.pp;
  const double share = static_cast<double>(tp - 1) / tp, L = cfg.model.n_layer / pp,
               rows = double(cfg.train.micro_batch) * (cfg.model.seq_len / cfg.parallel.cp),
               elements = rows * cfg.model.d_model,
               mm = cfg.precision.compute == "fp32" ? 4 : 2,  // the matmul inputs' bytes
      stats = (tp - 1) * rows * 3 * 4;                        // the cross-entropy's, gathered
  struct End {
    int64_t collectives;
    double bytes;
  };
  // per micro-batch, the embedding's end (its output all-reduced; under sequence parallelism
  // reduce-scattered, and its gradient gathered) and the head's (its input gradient all-reduced,
  // or the final norm's output gathered and that gradient reduce-scattered; and the statistics)
  const End embedding = sp ? End{2, 2 * elements * 4 * share} : End{1, elements * 4 * 2 * share};
  const End head =
      sp ? End{3, elements * (mm + 4) * share + stats} : End{2, elements * 4 * 2 * share + stats};
  End ends = {embedding.collectives + head.collectives, embedding.bytes + head.bytes};
  if (pp > 1) ends = embedding.bytes > head.bytes ? embedding : head;
  const int64_t accum = cfg.train.grad_accum;
  if (!sp) {
    const int64_t blocks = (full ? 6 : 4) * static_cast<int64_t>(L);
    t.collectives = accum * (blocks + ends.collectives);
    t.sent_bytes = double(accum) * (double(blocks) * elements * 4 * 2 * share + ends.bytes);
    return t;
  }
  // per micro-batch and block: 2 gathers and 2 reduce-scatters in each forward (and recompute),
  // 4 gathers (the gradient twice, ln1 and ln2 again) and 2 reduce-scatters in backward
  const double forwards = full ? 2 : 1;
  t.collectives = accum * (static_cast<int64_t>((4 * forwards + 6) * L) + ends.collectives);
  const double gathers = (2 * forwards + 4) * L * elements * mm,
               scatters = (2 * forwards + 2) * L * elements * 4;
  t.sent_bytes = double(accum) * ((gathers + scatters) * share + ends.bytes);
  return t;
}

HeldState held_state_bytes(const config::RunConfig& cfg, int zero, int dp, const DeviceKind& device,
                           int stage) {
  const model::ParamLayout layout = rank_layout(cfg, stage);
  HeldState h = held_state_of(layout, cfg, zero, dp, device);
  // a pipeline end stage receives the other end's wte gradient, a chunk at a time
  // (parallel::PipelineRunner; at pp 2 an all-reduce sums it in place)
  if (cfg.parallel.pp > 2 && (stage == 0 || stage == cfg.parallel.pp - 1))
    h.state.grads += 4.0 * static_cast<double>(parallel::PipelineRunner::tied_grad_buffer_floats(
                               layout.find("wte.weight").numel));
  return h;
}

std::vector<Layout> search_layouts(const SearchRequest& request) {
  const report::ModelDims fd = report::model_dims(request.cfg.model);
  const double base_flops = report::flops_per_token(fd);
  const double usable = request.usable_fraction * request.device.memory_bytes;
  const int64_t global =
      int64_t{request.cfg.train.micro_batch} * request.cfg.train.grad_accum * request.dp;
  const bool config_sp = request.cfg.parallel.tp > 1 && request.cfg.parallel.sequence_parallel;
  std::vector<Layout> out;
  for (const auto& [tp, sp, pp] : split_candidates(request)) {
    config::RunConfig cfg = request.cfg;
    cfg.parallel.tp = tp;
    cfg.parallel.sequence_parallel = sp;
    cfg.parallel.pp = pp;
    const int cp = cfg.parallel.cp;  // (kept as configured)
    const int dp = request.devices > 0 ? request.devices / (tp * pp * cp) : request.dp;
    const int replicas = dp * cp;          // ZeRO's group and the gradients' (dp x cp)
    const int64_t per_rank = global / dp;  // sequences per dp rank: the global batch kept
    if (replicas > smallest_rank_numel(cfg)) continue;
    if (pp > 1) {
      search_pipeline(request, cfg, dp, per_rank, base_flops, fd, usable, out);
      continue;
    }
    const model::ParamLayout layout = rank_layout(cfg);
    // ZeRO shards over dp x cp: with one rank no stage saves memory, so only 0 is tried (and the
    // config's own stage, to show where it stands).
    std::vector<int> stages = {0, 1, 2, 3};
    if (replicas == 1)
      stages =
          cfg.parallel.zero == 0 ? std::vector<int>{0} : std::vector<int>{0, cfg.parallel.zero};
    for (const int zero : stages) {
      const HeldState held = held_state_of(layout, cfg, zero, replicas, request.device);
      for (const int64_t mb : divisors(per_rank)) {
        // config::validate bounds micro_batch and grad_accum to an int each; so must a layout.
        if (mb > std::numeric_limits<int>::max() || per_rank / mb > std::numeric_limits<int>::max())
          continue;
        // a mixture of experts: each tp rank routes whole sequences
        if (cfg.model.moe.num_experts > 0 && mb % tp != 0) continue;
        for (const char* recompute : {"none", "selective", "full"}) {
          Layout l;
          l.tp = tp;
          l.dp = dp;
          l.sequence_parallel = sp;
          l.zero = zero;
          l.micro_batch = static_cast<int>(mb);
          l.grad_accum = static_cast<int>(per_rank / mb);
          l.activation_checkpointing = recompute;
          l.held = held;
          l.activations = static_cast<double>(
              activation_bytes_of(layout, cfg, l.micro_batch, recompute, request.flash_attention));
          l.fits = l.total() <= usable;
          l.flops_ratio =
              (base_flops + report::recompute_flops_per_token(fd, recompute)) / base_flops;
          l.dp_traffic_bytes = dp_traffic_bytes(cfg, layout, zero, replicas, l.grad_accum);
          l.is_config = tp == request.cfg.parallel.tp && sp == config_sp &&
                        request.cfg.parallel.pp == 1 && zero == cfg.parallel.zero &&
                        mb == cfg.train.micro_batch &&
                        l.activation_checkpointing == cfg.activation_checkpointing;
          out.push_back(l);
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Layout& a, const Layout& b) { return rank_key(a) < rank_key(b); });
  return out;
}

}  // namespace trainer::plan

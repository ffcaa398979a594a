#include "runtime/plan/layout_search.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "runtime/core/attention_state.h"
#include "runtime/model/activations.h"
#include "runtime/model/param_layout.h"
#include "runtime/report/flops.h"

namespace trainer::plan {

namespace {

constexpr double kMiB = 1024.0 * 1024.0, kGiB = kMiB * 1024.0;

model::ParamLayout whole_layout(const config::RunConfig& cfg) {
  const model::GptDims dims = model::GptDims::from_config(cfg.model);
  return model::ParamLayout(dims, model::GptShard::whole(dims));
}

report::ModelDims flop_dims(const config::ModelConfig& m) {
  return {m.vocab_size, m.seq_len, m.n_layer, m.d_model, m.ffn_mult};
}

// Ranking key: smaller is better (see layout_search.h).
auto rank_key(const Layout& l) {
  return std::make_tuple(!l.fits, l.fits ? l.flops_ratio : l.total(),
                         l.fits ? l.dp_traffic_bytes : 0.0, -l.micro_batch, l.zero);
}

}  // namespace

DeviceKind device_kind(const std::string& name, int ranks, double memory_gib) {
  DeviceKind d{name, 0, name != "cpu"};
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
                        const std::string& activation_checkpointing, bool flash_attention) {
  const model::ParamLayout layout = whole_layout(cfg);
  const model::GptDims& dims = layout.dims();
  const int T = cfg.model.seq_len;
  const bool bf16 = cfg.precision.compute != "fp32", fp8 = cfg.precision.compute == "fp8";
  return model::Activations::bytes_needed(
      layout, micro_batch, T, model::parse_recompute(activation_checkpointing),
      bf16 ? DType::bf16 : DType::f32,
      attention_state_shape_of(flash_attention, micro_batch, dims.n_head, T), fp8);
}

parallel::ZeroPrediction held_state_bytes(const config::RunConfig& cfg, int zero, int dp,
                                          const DeviceKind& device) {
  const model::ParamLayout layout = whole_layout(cfg);
  const auto& units = layout.units();
  parallel::LiveUnits live;
  live.embedding = units.front().numel;
  live.final_norm = units.back().numel;
  for (size_t u = 1; u + 1 < units.size(); ++u)
    live.largest_block = std::max(live.largest_block, units[u].numel);
  return parallel::predict_held_state(zero, layout.total_numel(), dp,
                                      parallel::bytes_per_param(cfg.precision.compute),
                                      /*releases_pages=*/!device.cuda, live);
}

double dp_traffic_bytes(int zero, int64_t num_params, int dp, int grad_accum) {
  const double one_pass = 4.0 * static_cast<double>(num_params) * (dp - 1) / dp;
  switch (zero) {
    case 0:
      return 2 * one_pass;
    case 1:
      return 2 * one_pass;
    case 2:
      return (grad_accum + 1) * one_pass;
    default:
      return 3.0 * grad_accum * one_pass;
  }
}

std::vector<Layout> search_layouts(const SearchRequest& request) {
  const config::RunConfig& cfg = request.cfg;
  const int per_rank = cfg.train.micro_batch * cfg.train.grad_accum;
  const report::ModelDims fd = flop_dims(cfg.model);
  const double base_flops = report::flops_per_token(fd);
  const int64_t num_params = whole_layout(cfg).total_numel();
  const double usable = request.usable_fraction * request.device.memory_bytes;
  // ZeRO shards over dp: with one rank no stage saves memory, so only 0 is tried (and the
  // config's own stage, to show where it stands).
  std::vector<int> stages = {0, 1, 2, 3};
  if (request.dp == 1)
    stages = cfg.parallel.zero == 0 ? std::vector<int>{0} : std::vector<int>{0, cfg.parallel.zero};
  std::vector<Layout> out;
  for (const int zero : stages) {
    const parallel::ZeroPrediction state = held_state_bytes(cfg, zero, request.dp, request.device);
    for (int mb = 1; mb <= per_rank; ++mb) {
      if (per_rank % mb != 0) continue;
      for (const char* recompute : {"none", "selective", "full"}) {
        Layout l;
        l.zero = zero;
        l.micro_batch = mb;
        l.grad_accum = per_rank / mb;
        l.activation_checkpointing = recompute;
        l.state = state;
        l.activations =
            static_cast<double>(activation_bytes(cfg, mb, recompute, request.flash_attention));
        l.fits = l.total() <= usable;
        l.flops_ratio =
            (base_flops + report::recompute_flops_per_token(fd, recompute)) / base_flops;
        l.dp_traffic_bytes = dp_traffic_bytes(zero, num_params, request.dp, l.grad_accum);
        l.is_config = zero == cfg.parallel.zero && mb == cfg.train.micro_batch &&
                      l.activation_checkpointing == cfg.activation_checkpointing;
        out.push_back(l);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Layout& a, const Layout& b) { return rank_key(a) < rank_key(b); });
  return out;
}

}  // namespace trainer::plan

#include "runtime/ckpt/reshard.h"

#include <charconv>
#include <set>
#include <sstream>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/config/run_config.h"
#include "runtime/parallel/zero_layout.h"

namespace trainer::ckpt {

// --to is user input: its errors are config::ConfigError (exit status 2), naming the item.
namespace {

constexpr const char* kRanges = "dp in [1, 65536], tp, pp, cp and ep in [1, 1024] and zero in 0..3";
constexpr long long kMaxWorld = 1 << 20;  // as trainer plan --gpus

}  // namespace

Grid parse_grid(const std::string& spec, const Grid& from) {
  Grid g = from;
  std::stringstream ss(spec);
  std::string item;
  auto bad = [&](const std::string& what) {
    throw config::ConfigError("--to " + spec + ": " + what + " (expected e.g. dp=4,zero=1)");
  };
  if (spec.empty()) bad("empty");
  std::set<std::string> seen;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) bad("expected key=value, got '" + item + "'");
    const std::string k = item.substr(0, eq), text = item.substr(eq + 1);
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range && end == text.data() + text.size())
      bad("'" + item + "': " + k + " is out of range (" + kRanges + ")");
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
      bad("'" + item + "': " + k + " must be an integer");
    if (!seen.insert(k).second) bad(k + " is given twice");
    if (k == "dp")
      g.dp = v;
    else if (k == "zero")
      g.zero = v;
    else if (k == "tp")
      g.tp = v;
    else if (k == "pp")
      g.pp = v;
    else if (k == "cp")
      g.cp = v;
    else if (k == "ep")
      g.ep = v;
    else
      bad("unknown key '" + k + "' (dp, zero, tp, pp, cp, ep)");
  }
  if (g.dp < 1 || g.dp > 65536 || g.tp < 1 || g.tp > 1024 || g.pp < 1 || g.pp > 1024 || g.cp < 1 ||
      g.cp > 1024 || g.ep < 1 || g.ep > 1024 || g.zero < 0 || g.zero > 3)
    bad(std::string("need ") + kRanges);
  const long long world = 1LL * g.dp * g.pp * g.cp * g.tp;
  if (world > kMaxWorld)
    bad("dp * pp * cp * tp = " + std::to_string(world) + " ranks, more than " +
        std::to_string(kMaxWorld) + " (one shard file each)");
  if (g.pp > 1 && g.zero > 1) bad("pipeline parallelism runs with zero 0 or 1");
  if ((g.dp * g.cp) % g.ep != 0) bad("ep must divide dp * cp (expert groups reuse those ranks)");
  g.world = static_cast<int>(world);
  return g;
}

std::pair<int64_t, int64_t> owned_range(int64_t total, int rank, const Grid& grid) {
  // (under expert parallelism the first ep replicas, ep group 0, own their whole buffers; all
  // but the first save their experts only: saved_pieces)
  if (grid.zero == 0)
    return rank < grid.ep ? std::pair<int64_t, int64_t>{0, total}
                          : std::pair<int64_t, int64_t>{0, 0};
  const int replicas = grid.dp * grid.cp;  // ZeRO shards over dp x cp
  if (total < replicas)
    throw config::ConfigError("--to dp=" + std::to_string(grid.dp) +
                              ",cp=" + std::to_string(grid.cp) + ": ZeRO cannot shard a rank's " +
                              std::to_string(total) + " parameters over " +
                              std::to_string(replicas) + " replicas");
  // the runtime's cut, so that each rank's file holds what that rank owns when it resumes
  const parallel::Range r = parallel::ZeroShards(total, replicas).shard(rank);
  return {r.begin, r.end};
}

std::vector<std::pair<int64_t, int64_t>> owned_runs(const model::ParamLayout& layout, int rank,
                                                    const Grid& grid) {
  if (grid.ep == 1 || grid.zero == 0) return {owned_range(layout.total_numel(), rank, grid)};
  // ZeRO under expert parallelism: the dense runs sharded over the dp x cp replicas, the
  // expert runs over the edp replicas (dist/mesh.h: the ep groups are blocks of `ep` replicas)
  const int replicas = grid.dp * grid.cp;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const parallel::ZeroSegment& s :
       parallel::zero_segments(layout, replicas, replicas / grid.ep)) {
    const parallel::Range r = s.owned(s.expert ? rank / grid.ep : rank);
    out.emplace_back(r.begin, r.end);
  }
  return out;
}

void check_grid_for_model(const model::GptDims& d, const Grid& grid) {
  if (d.n_head % grid.tp != 0 || d.ffn_hidden() % grid.tp != 0 || d.padded_vocab() % grid.tp != 0)
    throw config::ConfigError(
        "--to tp=" + std::to_string(grid.tp) + ": tp must divide the model's n_head (" +
        std::to_string(d.n_head) + "), MLP width (" + std::to_string(d.ffn_hidden()) +
        ") and padded vocabulary (" + std::to_string(d.padded_vocab()) + " rows of wte)");
  if (grid.ep > 1 && (d.num_experts == 0 || d.num_experts % grid.ep != 0))
    throw config::ConfigError("--to ep=" + std::to_string(grid.ep) +
                              ": ep must divide the model's experts (" +
                              std::to_string(d.num_experts) + ")");
  if (grid.cp > 1 && d.seq_len % (2 * grid.cp) != 0)
    throw config::ConfigError(
        "--to cp=" + std::to_string(grid.cp) + ": 2 * cp must divide the model's seq_len (" +
        std::to_string(d.seq_len) + "): context parallelism cuts a sequence into 2 * cp chunks");
  if (d.n_layer % grid.pp != 0)
    throw config::ConfigError("--to pp=" + std::to_string(grid.pp) +
                              ": pp must divide the model's n_layer (" + std::to_string(d.n_layer) +
                              ")");
}

std::string reshard_checkpoint(const std::string& step_dir, const Grid& grid,
                               const std::string& out_root) {
  CheckpointReader reader(step_dir);
  Manifest m = reader.manifest();
  const model::GptDims& d = m.model;
  check_grid_for_model(d, grid);
  m.trained_world = m.world_that_trained();  // (a resume names the world that trained)
  m.grid = grid;
  const std::string tmp = begin_checkpoint(out_root, m.step);
  std::vector<ShardFile> shards;
  for (int r = 0; r < grid.world; ++r) {
    // The runtime's rank order (dist/mesh.h): tp fastest, then cp, pp, dp; the cp ranks are
    // replicas, numbered dp * cp + cp among them (the dp x cp group ZeRO shards over).
    const int tp_rank = r % grid.tp, cp_rank = r / grid.tp % grid.cp,
              pp_rank = r / (grid.tp * grid.cp) % grid.pp,
              dp_rank = r / (grid.tp * grid.cp * grid.pp);
    const int replica = dp_rank * grid.cp + cp_rank;
    model::GptShard shard = model::GptShard::stage(d, pp_rank, grid.pp, tp_rank, grid.tp);
    shard.ep_rank = replica % grid.ep;  // (dist/mesh.h: ep groups are blocks of the replicas)
    shard.ep_size = grid.ep;
    const model::ParamLayout layout(d, shard);
    const auto runs = owned_runs(layout, replica, grid);
    int64_t n = 0;
    for (const auto& [b, e] : runs) n += e - b;
    std::vector<float> p(static_cast<size_t>(n)), mo(p.size()), v(p.size());
    OwnedRuns owned;
    int64_t at = 0;
    for (const auto& [b, e] : runs) {
      owned.push_back({b, e, p.data() + at, mo.data() + at, v.data() + at});
      at += e - b;
    }
    reader.read_owned(layout, owned);
    shards.push_back(write_shard_file(tmp, r, layout, owned, m));
  }
  return commit_checkpoint(out_root, m, model::ParamLayout(d, model::GptShard::whole(d)), shards,
                           0);
}

}  // namespace trainer::ckpt

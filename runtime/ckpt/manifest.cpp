#include "runtime/ckpt/manifest.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "runtime/ckpt/safetensors.h"

namespace trainer::ckpt {

std::string Grid::describe() const {
  std::ostringstream s;
  s << "world " << world << " (dp " << dp << " tp " << tp << " pp " << pp << " cp " << cp;
  if (ep > 1) s << " ep " << ep;
  s << ", zero " << zero << ")";
  return s.str();
}

namespace {

nlohmann::json dims_json(const model::GptDims& d) {
  nlohmann::json j = {{"vocab_size", d.vocab}, {"make_vocab_size_divisible_by", d.vocab_multiple},
                      {"seq_len", d.seq_len},  {"n_layer", d.n_layer},
                      {"d_model", d.d_model},  {"n_head", d.n_head},
                      {"ffn_mult", d.ffn_mult}};
  if (d.moe())  // (dense manifests keep their keys: a mixture of experts adds its own)
    j["moe"] = {
        {"num_experts", d.num_experts},
        {"top_k", d.top_k},
        // (JSON has no infinity: null, as in the config, for dropless)
        {"capacity_factor", std::isinf(d.capacity_factor) ? nlohmann::json(nullptr)
                                                          : nlohmann::json(d.capacity_factor)},
        {"aux_loss_coef", d.aux_loss_coef}};
  return j;
}

model::GptDims dims_from(const nlohmann::json& j) {
  model::GptDims d;
  d.vocab = j.at("vocab_size");
  d.seq_len = j.at("seq_len");
  d.n_layer = j.at("n_layer");
  d.d_model = j.at("d_model");
  d.n_head = j.at("n_head");
  d.ffn_mult = j.at("ffn_mult");
  d.vocab_multiple = j.value("make_vocab_size_divisible_by", 1);  // older manifests: no padding
  if (j.contains("moe")) {
    const nlohmann::json& m = j.at("moe");
    d.num_experts = m.at("num_experts");
    d.top_k = m.at("top_k");
    d.capacity_factor = m.at("capacity_factor").is_null() ? std::numeric_limits<double>::infinity()
                                                          : m.at("capacity_factor").get<double>();
    d.aux_loss_coef = m.at("aux_loss_coef");
  }
  return d;
}

nlohmann::json piece_json(const Piece& p) {
  nlohmann::json r = nlohmann::json::array();
  for (const auto& s : p.tp_ranges) r.push_back({s.global_start, s.length});
  return {
      {"tensor", p.tensor}, {"split_dim", p.split_dim}, {"tp_ranges", r}, {"range", {p.a, p.b}}};
}

Piece piece_from(const nlohmann::json& j) {
  Piece p;
  p.tensor = j.at("tensor");
  p.split_dim = j.at("split_dim");
  for (const auto& r : j.at("tp_ranges")) p.tp_ranges.push_back({r[0], r[1]});
  p.a = j.at("range")[0];
  p.b = j.at("range")[1];
  return p;
}

}  // namespace

nlohmann::json to_json(const Manifest& m) {
  nlohmann::json j;
  j["format"] = "trainer.ckpt/1";
  j["step"] = m.step;
  j["tokens"] = m.tokens;
  j["adam_step"] = m.adam_step;
  j["seed"] = m.seed;
  j["config_sha256"] = m.config_sha256;
  if (!m.run_id.empty()) j["run_id"] = m.run_id;
  if (!m.config_yaml.empty()) j["config"] = m.config_yaml;
  j["model"] = dims_json(m.model);
  j["grid"] = {{"world", m.grid.world}, {"dp", m.grid.dp}, {"tp", m.grid.tp},
               {"pp", m.grid.pp},       {"cp", m.grid.cp}, {"zero", m.grid.zero}};
  if (m.grid.ep > 1) j["grid"]["ep"] = m.grid.ep;
  if (m.world_that_trained() != m.grid.world) j["trained_world"] = m.world_that_trained();
  j["loader"] = {{"shard", m.loader.shard},
                 {"offset", m.loader.offset},
                 {"epoch", m.loader.epoch},
                 {"global_batch_tokens", m.loader_global_batch_tokens}};
  if (m.loader_shuffle) j["loader"]["shuffle"] = *m.loader_shuffle;
  for (const data::ShardSummary& s : m.loader_shards)
    j["loader"]["shards"].push_back({{"name", s.name}, {"tokens", s.tokens}});
  for (const RunResume& r : m.resumes)
    j["resumes"].push_back(
        {{"at_step", r.at_step}, {"world_size", r.world_size}, {"changes", r.changes}});
  if (const auto& t = m.step_totals) {
    j["step_totals"] = {{"steps", t->steps},
                        {"clipped_steps", t->clipped_steps},
                        {"nonfinite_steps", t->nonfinite_steps},
                        {"loss_sum_since_line", t->loss_sum_since_line},
                        {"losses_since_line", t->losses_since_line},
                        {"grad_norm_max", nullptr}};
    if (t->grad_norm_max) j["step_totals"]["grad_norm_max"] = *t->grad_norm_max;
  }
  if (!m.fp8_scaling.empty()) j["fp8_scaling"] = m.fp8_scaling;  // floats round-trip through JSON
  for (const auto& t : m.tensors)
    j["tensors"].push_back({{"name", t.name}, {"global_shape", t.global_shape}});
  for (const auto& s : m.shards) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const auto& p : s.pieces) pieces.push_back(piece_json(p));
    j["shards"].push_back({{"rank", s.rank},
                           {"file", s.file},
                           {"sha256", s.sha256},
                           {"bytes", s.bytes},
                           {"pieces", pieces}});
  }
  return j;
}

Manifest manifest_from_json(const nlohmann::json& j) {
  try {
    if (j.at("format") != "trainer.ckpt/1") throw CheckpointError("unknown format");
    Manifest m;
    m.step = j.at("step");
    m.tokens = j.at("tokens");
    m.adam_step = j.at("adam_step");
    m.seed = j.at("seed");
    m.config_sha256 = j.at("config_sha256");
    m.run_id = j.value("run_id", "");                          // written since 2026-12-07
    if (j.contains("config")) m.config_yaml = j.at("config");  // written since 2026-12-03
    m.model = dims_from(j.at("model"));
    const auto& g = j.at("grid");
    m.grid = {g.at("world"), g.at("dp"),   g.at("tp"),      g.at("pp"),
              g.at("cp"),    g.at("zero"), g.value("ep", 1)};
    m.trained_world = j.value("trained_world", 0);  // written by ckpt reshard since 2026-12-08
    const auto& l = j.at("loader");
    m.loader = {l.at("shard"), l.at("offset"), l.at("epoch")};
    if (l.contains("global_batch_tokens"))
      m.loader_global_batch_tokens = l.at("global_batch_tokens");
    if (l.contains("shuffle")) m.loader_shuffle = l.at("shuffle").get<bool>();
    if (l.contains("shards"))  // written since 2026-12-07
      for (const auto& s : l.at("shards"))
        m.loader_shards.push_back({s.at("name"), s.at("tokens")});
    if (j.contains("resumes"))  // written since 2026-12-07
      for (const auto& r : j.at("resumes"))
        m.resumes.push_back({r.at("at_step"), r.at("world_size"), r.at("changes")});
    if (j.contains("step_totals")) {  // written since 2026-12-07
      const auto& t = j.at("step_totals");
      m.step_totals = StepTotals{t.at("steps"), t.at("clipped_steps"), t.at("nonfinite_steps"), {}};
      if (!t.at("grad_norm_max").is_null()) m.step_totals->grad_norm_max = t.at("grad_norm_max");
      m.step_totals->loss_sum_since_line = t.value("loss_sum_since_line", 0.0);
      m.step_totals->losses_since_line = t.value("losses_since_line", int64_t{0});
    }
    if (j.contains("fp8_scaling")) m.fp8_scaling = j.at("fp8_scaling").get<std::vector<float>>();
    for (const auto& t : j.at("tensors")) m.tensors.push_back({t.at("name"), t.at("global_shape")});
    for (const auto& s : j.at("shards")) {
      ShardFile f{s.at("rank"), s.at("file"), s.at("sha256"), s.at("bytes"), {}};
      for (const auto& p : s.at("pieces")) f.pieces.push_back(piece_from(p));
      m.shards.push_back(std::move(f));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    // "key 'world' not found", without the library's "[json.exception.out_of_range.403] "
    const std::string what = e.what();
    const size_t id_end = what.find("] ");
    throw CheckpointError(id_end == std::string::npos ? what : what.substr(id_end + 2));
  }
}

Manifest read_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/" + kManifestName;
  std::ifstream in(path);
  if (!in) throw CheckpointError(step_dir + ": no " + kManifestName + " (incomplete checkpoint)");
  try {
    return manifest_from_json(nlohmann::json::parse(in));
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": invalid manifest: " + e.what());
  }
}

std::string model_difference(const model::GptDims& saved, const model::GptDims& wanted) {
  std::string out;
  auto compare = [&](const std::string& key, const nlohmann::json& a, const nlohmann::json& b) {
    if (a == b) return;
    out += (out.empty() ? "model." : ", model.") + key + " " + a.dump() + " (checkpoint) vs " +
           b.dump() + " (config)";
  };
  compare("vocab_size", saved.vocab, wanted.vocab);
  if (saved.padded_vocab() != wanted.padded_vocab())  // the multiple alone changes no shape
    compare("make_vocab_size_divisible_by", saved.vocab_multiple, wanted.vocab_multiple);
  compare("seq_len", saved.seq_len, wanted.seq_len);
  compare("n_layer", saved.n_layer, wanted.n_layer);
  compare("d_model", saved.d_model, wanted.d_model);
  compare("n_head", saved.n_head, wanted.n_head);
  compare("ffn_mult", saved.ffn_mult, wanted.ffn_mult);
  compare("moe.num_experts", saved.num_experts, wanted.num_experts);  // 0: dense
  return out;
}

std::vector<Piece> pieces_of_range(const model::ParamLayout& layout, int64_t begin, int64_t end) {
  std::vector<Piece> out;
  for (const auto& p : layout.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    out.push_back({p.name, p.split_dim, p.local_ranges, lo - p.offset, hi - p.offset});
  }
  return out;
}

std::vector<Piece> saved_pieces(const model::ParamLayout& layout, int64_t begin, int64_t end,
                                int zero) {
  std::vector<Piece> out = pieces_of_range(layout, begin, end);
  const bool tp_rank0 = layout.shard().tp_rank == 0,
             ep_rank0 = layout.shard().ep_rank == 0 || zero > 0;
  std::erase_if(out, [&](const Piece& p) {
    const model::ParamSpec& spec = layout.find(p.tensor);
    return spec.tied_copy || (!tp_rank0 && spec.tp_replicated) || (!ep_rank0 && !spec.expert);
  });
  return out;
}

}  // namespace trainer::ckpt

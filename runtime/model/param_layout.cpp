#include "runtime/model/param_layout.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "runtime/core/check.h"

namespace trainer::model {
namespace {

int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

ParamSpec replicated(std::string name, std::vector<int64_t> shape) {
  ParamSpec p;
  p.name = std::move(name);
  p.global_shape = shape;
  p.local_shape = shape;
  p.local_ranges = {{0, shape[0]}};
  return p;
}

ParamSpec norm_weight(std::string name, int64_t c) {
  ParamSpec p = replicated(std::move(name), {c});
  p.is_norm_weight = true;
  return p;
}

ParamSpec zero_bias(std::string name, int64_t c) {
  ParamSpec p = replicated(std::move(name), {c});
  p.is_bias_or_norm_bias = true;
  return p;
}

// Column-parallel (output rows split): `parts` equal blocks of `rows_per_part` rows (q|k|v has
// three), each cut into tp pieces; this rank takes piece tp_rank of every block.
ParamSpec column_parallel(std::string name, std::vector<int64_t> global, int parts,
                          const GptShard& s) {
  ParamSpec p;
  p.name = std::move(name);
  p.global_shape = global;
  int64_t rows_per_part = global[0] / parts;
  int64_t local_part = rows_per_part / s.tp_size;
  for (int i = 0; i < parts; ++i)
    p.local_ranges.push_back({i * rows_per_part + s.tp_rank * local_part, local_part});
  p.local_shape = global;
  p.local_shape[0] = local_part * parts;
  p.split_dim = 0;
  p.tp_replicated = s.tp_size == 1;
  return p;
}

// Row-parallel (input columns split, dim 1).
ParamSpec row_parallel(std::string name, std::vector<int64_t> global, const GptShard& s) {
  ParamSpec p;
  p.name = std::move(name);
  p.global_shape = global;
  int64_t local = global[1] / s.tp_size;
  p.local_ranges = {{s.tp_rank * local, local}};
  p.local_shape = {global[0], local};
  p.split_dim = 1;
  p.tp_replicated = s.tp_size == 1;
  return p;
}

}  // namespace

ParamLayout::ParamLayout(const GptDims& d, const GptShard& s) : dims_(d), shard_(s) {
  TRAINER_CHECK(d.n_head % s.tp_size == 0 && d.ffn_hidden() % s.tp_size == 0,
                "tp " << s.tp_size << " must divide n_head and the FFN width");
  TRAINER_CHECK(s.ep_size >= 1 && (s.ep_size == 1 || d.num_experts % s.ep_size == 0),
                "ep " << s.ep_size << " must divide the " << d.num_experts << " experts");
  TRAINER_CHECK(s.chunks >= 1 && s.num_layers % s.chunks == 0,
                s.num_layers << " blocks do not make " << s.chunks << " equal chunks");
  const int64_t C = d.d_model, V = d.padded_vocab(), T = d.seq_len, FC = d.ffn_hidden();
  TRAINER_CHECK(V % s.tp_size == 0, "tp " << s.tp_size << " must divide the padded vocabulary ("
                                          << V << " rows of wte)");
  if (s.has_embedding || s.has_head) {
    // The output layer is tied to wte, so a last stage without the embedding still holds it.
    // Vocabulary-parallel: each tp rank holds 1/tp of its rows (GptShard::vocab_start).
    ParamSpec wte = column_parallel("wte.weight", {V, C}, 1, s);
    wte.weight_decay = true;
    wte.tied_copy = !s.has_embedding;
    add(wte, 0);
  }
  if (s.has_embedding) {
    ParamSpec wpe = replicated("wpe.weight", {T, C});
    wpe.weight_decay = true;
    add(wpe, 0);
  }
  for (int local = 0; local < s.num_layers; ++local) {
    const int l = s.global_layer(local);
    const std::string h = "h." + std::to_string(l) + ".";
    const int unit = 1 + l;
    add(norm_weight(h + "ln_1.weight", C), unit);
    add(zero_bias(h + "ln_1.bias", C), unit);
    ParamSpec qkv = column_parallel(h + "attn.c_attn.weight", {3 * C, C}, 3, s);
    qkv.weight_decay = true;
    add(qkv, unit);
    ParamSpec qkv_b = column_parallel(h + "attn.c_attn.bias", {3 * C}, 3, s);
    qkv_b.is_bias_or_norm_bias = true;
    add(qkv_b, unit);
    ParamSpec proj = row_parallel(h + "attn.c_proj.weight", {C, C}, s);
    proj.weight_decay = true;
    proj.residual_proj = true;
    add(proj, unit);
    add(zero_bias(h + "attn.c_proj.bias", C), unit);
    add(norm_weight(h + "ln_2.weight", C), unit);
    add(zero_bias(h + "ln_2.bias", C), unit);
    if (d.moe()) {
      add_experts(h, unit);
      continue;
    }
    ParamSpec fc = column_parallel(h + "mlp.c_fc.weight", {FC, C}, 1, s);
    fc.weight_decay = true;
    add(fc, unit);
    ParamSpec fc_b = column_parallel(h + "mlp.c_fc.bias", {FC}, 1, s);
    fc_b.is_bias_or_norm_bias = true;
    add(fc_b, unit);
    ParamSpec fcproj = row_parallel(h + "mlp.c_proj.weight", {C, FC}, s);
    fcproj.weight_decay = true;
    fcproj.residual_proj = true;
    add(fcproj, unit);
    add(zero_bias(h + "mlp.c_proj.bias", C), unit);
  }
  if (s.has_head) {
    add(norm_weight("ln_f.weight", C), d.n_layer + 1);
    add(zero_bias("ln_f.bias", C), d.n_layer + 1);
  }
}

void ParamLayout::add_experts(const std::string& h, int unit) {
  const int64_t C = dims_.d_model, FC = dims_.ffn_hidden(), E = dims_.num_experts;
  // (whole on every tp rank; under sequence parallelism each routes its own rows' tokens, so the
  // router's and the experts' gradients sum over tp, as the layernorms')
  ParamSpec router = replicated(h + "mlp.router.weight", {E, C});
  router.weight_decay = true;
  router.grad_sums_over_tp = shard_.sequence_parallel;
  add(router, unit);
  // Stacked [E, ...] tensors; expert parallelism cuts them along the experts.
  const int64_t local = E / shard_.ep_size;
  auto expert = [&](const char* name, std::vector<int64_t> per_expert) {
    ParamSpec p;
    p.name = h + "mlp.experts." + name;
    p.global_shape = {E};
    p.global_shape.insert(p.global_shape.end(), per_expert.begin(), per_expert.end());
    p.local_shape = p.global_shape;
    p.local_shape[0] = local;
    p.local_ranges = {{shard_.ep_rank * local, local}};
    p.expert = true;
    p.grad_sums_over_tp = shard_.sequence_parallel;
    return p;
  };
  ParamSpec fc = expert("c_fc.weight", {FC, C});
  fc.weight_decay = true;
  add(fc, unit);
  ParamSpec fc_b = expert("c_fc.bias", {FC});
  fc_b.is_bias_or_norm_bias = true;
  add(fc_b, unit);
  ParamSpec proj = expert("c_proj.weight", {C, FC});
  proj.weight_decay = true;
  proj.residual_proj = true;
  add(proj, unit);
  ParamSpec proj_b = expert("c_proj.bias", {C});
  proj_b.is_bias_or_norm_bias = true;
  add(proj_b, unit);
}

void ParamLayout::add(ParamSpec spec, int unit) {
  spec.unit = unit;
  spec.grad_sums_over_tp = spec.grad_sums_over_tp ||
                           (shard_.sequence_parallel && spec.name.find("ln_") != std::string::npos);
  spec.offset = total_;
  spec.numel = product(spec.local_shape);
  total_ += spec.numel;
  if (units_.empty() || params_.back().unit != unit) units_.push_back({spec.offset, 0});
  units_.back().numel += spec.numel;
  params_.push_back(std::move(spec));
}

const ParamSpec& ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named '" + name + "'");
}

}  // namespace trainer::model

namespace trainer::model {

void for_each_slice_run(const std::vector<int64_t>& global_shape, int split_dim,
                        const std::vector<SliceRange>& ranges,
                        const std::function<void(int64_t, int64_t, int64_t)>& f) {
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(split_dim) + 1; i < global_shape.size(); ++i)
    inner *= global_shape[i];
  int64_t outer = 1;
  for (int i = 0; i < split_dim; ++i) outer *= global_shape[static_cast<size_t>(i)];
  const int64_t global_dim = global_shape[static_cast<size_t>(split_dim)];
  int64_t local_dim = 0;
  for (const auto& r : ranges) local_dim += r.length;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t local_pos = 0;
    for (const auto& r : ranges) {
      f((o * global_dim + r.global_start) * inner, (o * local_dim + local_pos) * inner,
        r.length * inner);
      local_pos += r.length;
    }
  }
}

namespace {

void for_each_run(const ParamSpec& s, const std::function<void(int64_t, int64_t, int64_t)>& f) {
  for_each_slice_run(s.global_shape, s.split_dim, s.local_ranges, f);
}

}  // namespace

void extract_local(const ParamSpec& spec, const float* global, float* local) {
  for_each_run(spec, [&](int64_t g, int64_t l, int64_t n) {
    std::copy(global + g, global + g + n, local + l);
  });
}

void insert_local(const ParamSpec& spec, const float* local, float* global) {
  for_each_run(spec, [&](int64_t g, int64_t l, int64_t n) {
    std::copy(local + l, local + l + n, global + g);
  });
}

}  // namespace trainer::model

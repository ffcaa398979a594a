#include "runtime/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/fp8_recipe.h"
#include "runtime/core/rng.h"
#include "runtime/model/tensor_views.h"

namespace trainer::model {
namespace {

// Causal attention over qkv [B, T, 3C]: QK^T and PV over each sequence's T(T+1)/2 (query, key)
// pairs, whatever the kernel computes besides; backward is twice this.
// Context parallelism: this rank's queries, L = T / 2 in each of chunks r and 2cp - 1 - r, see
// every key up to theirs: L^2 (2cp - 1) + L (L + 1) pairs per sequence.
double attention_flops(const Tensor& qkv, const GptShard& s) {
  const double B = static_cast<double>(qkv.shape[0]), T = static_cast<double>(qkv.shape[1]),
               C = static_cast<double>(qkv.shape[2]) / 3;
  if (s.cp_size == 1) return 2.0 * B * C * T * (T + 1);
  const double L = T / 2, pairs = L * L * (2 * s.cp_size - 1) + L * (L + 1);
  return 4.0 * B * C * pairs;
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

struct Gpt::BlockWeights {
  Tensor ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

Gpt::Gpt(Backend& be, const GptDims& dims, const GptShard& shard, StateMemory memory)
    : be_(be), layout_(dims, shard), memory_(memory) {
  // (each tp rank routes the sequences of its own rows: gpt_moe.cpp)
  TRAINER_CHECK(!dims.moe() || shard.tp_size == 1 || shard.sequence_parallel,
                "mixture-of-experts blocks with tp > 1 run with sequence parallelism");
  const int64_t n = layout_.total_numel();
  const DeviceType dev = be_.device();
  const size_t bytes = static_cast<size_t>(n) * 4;
  params_ = Tensor(alloc_state(bytes), {n}, DType::f32, dev);
  const bool whole = memory == StateMemory::whole;
  grads_ = Tensor(whole ? be_.alloc(bytes) : be_.alloc_released(bytes), {n}, DType::f32, dev);
  compute_params_ = params_;
  if (memory != StateMemory::released) be_.zero(params_);  // (released ones read 0 once acquired)
  if (whole) be_.zero(grads_);
}

void* Gpt::alloc_state(size_t bytes) {
  switch (memory_) {
    case StateMemory::whole:
    case StateMemory::grads_released:  // (never released: no need of unmappable pages)
      return be_.alloc(bytes);
    case StateMemory::released:  // (alloc_released counts fp32 elements: a bf16 copy rounds up)
      return be_.alloc_released((bytes + 3) / 4 * 4);
  }
  return nullptr;
}

Gpt::~Gpt() {
  if (compute_params_.data != params_.data) be_.free(compute_params_.data);
  be_.free(params_.data);
  be_.free(grads_.data);
}

Tensor Gpt::param(const ParamSpec& p) const {
  Shape s;
  for (int64_t d : p.local_shape) s.dims[static_cast<size_t>(s.rank++)] = d;
  return Tensor(static_cast<float*>(params_.data) + p.offset, s, DType::f32, be_.device());
}

Tensor Gpt::grad(const ParamSpec& p) const {
  Tensor t = param(p);
  t.data = static_cast<float*>(grads_.data) + p.offset;
  return t;
}

void Gpt::init_weights(uint64_t seed) {
  TRAINER_CHECK(memory_ != StateMemory::released,
                "init_weights on released params (ZeRO 3): draw the owned shard, "
                "init_weights_within (TrainStep::init_weights)");
  init_weights_within(seed, {{0, layout_.total_numel()}});
  refresh_compute_weights();
}

void Gpt::init_weights_within(uint64_t seed, const std::vector<ElementRange>& ranges) {
  const GptDims& d = layout_.dims();
  const double residual_std = 0.02 / std::sqrt(2.0 * d.n_layer);
  std::vector<float> global, local;
  for (const ParamSpec& p : layout_.params()) {
    const auto meets = [&](const ElementRange& r) {
      return r.begin < p.offset + p.numel && p.offset < r.end;
    };
    if (std::none_of(ranges.begin(), ranges.end(), meets)) continue;
    int64_t gnumel = 1;
    for (int64_t v : p.global_shape) gnumel *= v;
    global.assign(static_cast<size_t>(gnumel), 0.0f);
    if (p.is_norm_weight) {
      std::fill(global.begin(), global.end(), 1.0f);
    } else if (!p.is_bias_or_norm_bias) {
      SplitMix64 rng(mix_seed(seed, name_hash(p.name)));
      const double std = p.residual_proj ? residual_std : 0.02;
      for (float& v : global) v = static_cast<float>(std * rng.normal());
    }
    if (p.name == "wte.weight")  // the padding rows past V: zero (they only meet masked logits)
      std::fill(global.begin() + static_cast<long>(d.vocab) * d.d_model, global.end(), 0.0f);
    local.resize(static_cast<size_t>(p.numel));
    extract_local(p, global.data(), local.data());
    for (const ElementRange& r : ranges) {
      const int64_t lo = std::max(r.begin, p.offset), hi = std::min(r.end, p.offset + p.numel);
      if (lo < hi) be_.from_host(params_.slice(lo, hi - lo), local.data() + (lo - p.offset));
    }
  }
}

void Gpt::linear_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                         int l, int which, const Tensor& residual) {
  if (!fp8_) {
    be_.matmul_forward(out, inp, weight, bias, residual);
    return;
  }
  // fp8: a bf16 out (qkv) is the fp32 sum with the bias, rounded once (as in bf16 compute)
  fp8_linear_forward(out, inp, weight, bias, int64_t{l} * 4 + which);
  if (!residual.empty()) {
    TRAINER_CHECK(out.dtype == DType::f32, "a residual needs an fp32 out");
    be_.axpy(out, residual, 1.0f);
  }
}

void Gpt::mlp_hidden_forward(BlockActivations& a, const Tensor& ln2, const Tensor& weight,
                             const Tensor& bias, int l) {
  if (!fp8_) {  // the GELU rides in the GEMM's epilogue (Backend::matmul_gelu_forward)
    be_.matmul_gelu_forward(rows(a.fch_gelu), rows(a.fch), rows(ln2), weight, bias);
    return;
  }
  // fp8: the fp8 GEMM's fp32 sums, then the same two roundings as the fused op's
  const Tensor sum = fp8_sums(a.fch.shape);
  linear_forward(rows(sum), rows(ln2), weight, bias, l, 2);
  be_.round_to_bf16(a.fch, sum);
  be_.gelu_forward(a.fch_gelu, sum);
}

void Gpt::set_compute_bf16(bool on) {
  if (on == bf16_) return;
  bf16_ = on;
  if (on) {
    compute_params_ =
        Tensor(alloc_state(static_cast<size_t>(params_.numel()) * dtype_size(DType::bf16)),
               params_.shape, DType::bf16, be_.device());
  } else {
    be_.free(compute_params_.data);
    compute_params_ = params_;
  }
  // (released params: ZeRO 3 rounds each unit's copy at its gather)
  if (memory_ != StateMemory::released) refresh_compute_weights();
  if (acts_) reallocate_activations();  // the matmul inputs change dtype
}

void Gpt::refresh_compute_weights() {
  refresh_compute_weights(0, params_.numel());
}

void Gpt::refresh_compute_weights(int64_t begin, int64_t n) {
  if (bf16_) be_.round_to_bf16(compute_params_.slice(begin, n), params_.slice(begin, n));
}

Tensor Gpt::weight_view(const std::string& name, bool grad_view) const {
  return grad_view ? grad(layout_.find(name)) : param(layout_.find(name));
}

Tensor Gpt::matmul_weight(const std::string& name) const {
  const ParamSpec& p = layout_.find(name);
  Tensor t = param(p);
  t.dtype = compute_params_.dtype;
  t.data = static_cast<char*>(compute_params_.data) +
           static_cast<size_t>(p.offset) * dtype_size(compute_params_.dtype);
  return t;
}

Gpt::BlockWeights Gpt::block_weights(int local_layer, bool g) const {
  const std::string h = "h." + std::to_string(layout_.shard().global_layer(local_layer)) + ".";
  auto w = [&](const char* n) { return weight_view(h + n, g); };
  // The matmuls read the compute copy (bf16 under precision.compute bf16); gradients are fp32.
  auto mm = [&](const char* n) { return g ? weight_view(h + n, true) : matmul_weight(h + n); };
  BlockWeights b{w("ln_1.weight"),
                 w("ln_1.bias"),
                 mm("attn.c_attn.weight"),
                 w("attn.c_attn.bias"),
                 mm("attn.c_proj.weight"),
                 w("attn.c_proj.bias"),
                 w("ln_2.weight"),
                 w("ln_2.bias"),
                 {},
                 {},
                 {},
                 {}};
  if (layout_.dims().moe()) return b;  // (the experts' weights: gpt_moe.cpp)
  b.fcw = mm("mlp.c_fc.weight");
  b.fcb = w("mlp.c_fc.bias");
  b.fcprojw = mm("mlp.c_proj.weight");
  b.fcprojb = w("mlp.c_proj.bias");
  return b;
}

PhaseProfiler::Scope Gpt::phase(const char* op, double flops) const {
  if (!profiler_ || !profiler_->in_step()) return PhaseProfiler::Scope(nullptr, {}, 0);
  return PhaseProfiler::Scope(profiler_, std::string(pass_) + "." + op, flops);
}

void Gpt::call_before(int unit, bool backward) {
  if (!hooks_.before_unit) return;
  auto p = phase("hook.before_unit");
  hooks_.before_unit(unit, backward);
}

void Gpt::call_ready(int unit) {
  if (!hooks_.unit_grads_ready || !grads_final_) return;
  auto p = phase("hook.grads_ready");
  hooks_.unit_grads_ready(unit);
}

double Gpt::forward(const int32_t* inputs, const int32_t* targets, float dloss_scale) {
  TRAINER_CHECK(acts_, "allocate_activations() before forward()");
  const GptShard& s = layout_.shard();
  Activations& a = *acts_;
  dloss_scale_ = dloss_scale;
  pass_ = "fwd";
  const bool embed = runs_embedding(), head = runs_head();
  if (embed || head) {  // (a middle pipeline stage reads neither)
    auto p = phase("tokens");
    if (embed) be_.from_host(a.inputs, vocab_inputs(inputs));
    if (head) be_.from_host(a.targets, targets);
  }

  if (embed) {  // (a later pipeline stage's input was received into stage_input())
    call_before(0, false);
    embedding_forward();
  }
  const int first = chunk_first_layer();
  for (int l = first; l < first + s.layers_per_chunk(); ++l) {
    call_before(1 + s.global_layer(l), false);
    block_forward(l);
  }
  if (!head) return 0;  // stage_output() goes on to the next pipeline stage
  const int final_unit = layout_.dims().n_layer + 1;
  call_before(final_unit, false);
  const Tensor& last = a.blocks.empty() ? a.encoded : a.blocks.back().residual_out;
  const bool sp = s.sequence_parallel;
  {
    auto p = phase("ln_f");
    be_.layernorm_forward(sp ? a.sp.ln_rows : rows(a.lnf), flat(a.lnf_mean), flat(a.lnf_rstd),
                          rows(last), weight_view("ln_f.weight", false),
                          weight_view("ln_f.bias", false));
  }
  if (sp) tp_all_gather(a.sp.ln_rows, a.lnf);
  {
    auto p = phase("head", matmul_flops(a.logits, a.lnf));
    be_.matmul_forward(rows(a.logits), rows(a.lnf), matmul_weight("wte.weight"), Tensor());
  }
  cross_entropy(dloss_scale);
  auto p = phase("loss_sum");  // waits for the forward: the host reads the loss
  return be_.sum(a.losses) / static_cast<double>(a.losses.numel());
}

void Gpt::embedding_forward() {
  Activations& a = *acts_;
  const GptShard& s = layout_.shard();
  const int64_t C = layout_.dims().d_model;
  // the positions once, on tp rank 0, as the row-parallel layers' biases
  const Tensor wte = weight_view("wte.weight", false),
               wpe = s.tp_rank == 0 ? weight_view("wpe.weight", false) : Tensor();
  const bool scatter = s.sequence_parallel && s.tp_size > 1;
  const Tensor out = scatter ? a.sp.partial : a.encoded.view({a.B, a.T, C});
  {
    auto p = phase("embedding");
    if (s.cp_size == 1) {
      be_.embedding_forward(out, a.inputs, wte, wpe, 0);
    } else {
      const int64_t L = a.T / 2;
      for (int64_t b = 0; b < a.B; ++b)
        for (int half = 0; half < 2; ++half) {
          const int64_t row = b * a.T + half * L;
          be_.embedding_forward(out.slice(row * C, L * C).view({1, L, C}),
                                a.inputs.slice(row, L).view({1, L}), wte, wpe,
                                s.context_chunk(half) * L);
        }
    }
  }
  if (scatter)
    tp_reduce_scatter(out, a.encoded);
  else
    tp_all_reduce(a.encoded);
}

void Gpt::cross_entropy(float dloss_scale) {
  Activations& a = *acts_;
  const GptShard& s = layout_.shard();
  const int64_t vocab = layout_.dims().vocab;
  if (s.tp_size == 1) {
    auto p = phase("cross_entropy");
    be_.softmax_cross_entropy(rows(a.logits), flat(a.losses), flat(a.targets), dloss_scale, vocab);
    return;
  }
  const int64_t start = s.vocab_start(layout_.dims());
  {
    auto p = phase("cross_entropy_stats");
    be_.cross_entropy_shard_stats(a.ce_stats, rows(a.logits), flat(a.targets), start, vocab);
  }
  tp_all_gather(a.ce_stats, a.ce_all_stats);
  auto p = phase("cross_entropy");
  be_.cross_entropy_shard_finish(rows(a.logits), flat(a.losses), a.ce_all_stats, flat(a.targets),
                                 dloss_scale, start, vocab);
}

void Gpt::embedding_backward(const Tensor& dout) {
  Activations& a = *acts_;
  const GptShard& s = layout_.shard();
  const Tensor dwte = weight_view("wte.weight", true), dwpe = weight_view("wpe.weight", true);
  if (s.cp_size == 1) {
    be_.embedding_backward(dwte, dwpe, dout, a.inputs, 0);
    return;
  }
  const int64_t C = layout_.dims().d_model, L = a.T / 2;
  for (int64_t b = 0; b < a.B; ++b)
    for (int half = 0; half < 2; ++half) {
      const int64_t row = b * a.T + half * L;
      be_.embedding_backward(dwte, dwpe, dout.slice(row * C, L * C).view({1, L, C}),
                             a.inputs.slice(row, L).view({1, L}), s.context_chunk(half) * L);
    }
}

void Gpt::attention_forward(BlockActivations& a) {
  const GptShard& s = layout_.shard();
  const int heads = layout_.dims().n_head / s.tp_size;
  if (s.cp_size == 1) {
    auto p = phase("attention", attention_flops(a.qkv, s));
    be_.attention_forward(a.atty, a.att, a.qkv, heads);
    return;
  }
  const Tensor all = acts_->cp.qkv_all;
  cp_all_gather(a.qkv, all);
  auto p = phase("attention", attention_flops(a.qkv, s));
  be_.attention_forward_cp(a.atty, a.att, all, {s.cp_rank, s.cp_size}, heads);
}

void Gpt::attention_backward(BlockActivations& a) {
  const GptShard& s = layout_.shard();
  GradScratch& g = acts_->grad;
  const int heads = layout_.dims().n_head / s.tp_size;
  if (s.cp_size == 1) {
    auto p = phase("attention", 2 * attention_flops(a.qkv, s));
    be_.attention_backward(g.dqkv, g.datty, a.qkv, a.atty, a.att, heads);
    return;
  }
  // The gathered keys and values are one buffer for every block: gathered again (Megatron's
  // ring attention passes them around again in backward too).
  const ContextParallelScratch& cp = acts_->cp;
  cp_all_gather(a.qkv, cp.qkv_all);
  {
    auto p = phase("attention", 2 * attention_flops(a.qkv, s));
    be_.attention_backward_cp(cp.dqkv_all, g.datty, cp.qkv_all, a.atty, a.att,
                              {s.cp_rank, s.cp_size}, heads);
  }
  {
    TRAINER_CHECK(hooks_.cp_reduce_scatter, "context parallelism without a cp reduce-scatter hook");
    auto p = phase("cp_reduce_scatter");
    hooks_.cp_reduce_scatter(cp.dqkv_all, cp.dqkv_rows.empty() ? g.dqkv : cp.dqkv_rows);
  }
  if (!cp.dqkv_rows.empty()) {  // bf16 compute: the qkv GEMMs read dqkv rounded
    auto p = phase("round_dqkv");
    be_.round_to_bf16(g.dqkv, cp.dqkv_rows);
  }
}

void Gpt::block_forward(int l) {
  Activations& acts = *acts_;
  BlockActivations& a = block_acts(l);
  const BlockWeights w = block_weights(l, false);
  const GptShard& s = layout_.shard();
  // Row-parallel layers add their bias and the residual once (tp rank 0) before the partial sums
  // are reduced; the residual add rides in the GEMM (Backend::matmul_forward).
  const bool rank0 = s.tp_rank == 0;
  // Sequence parallelism: each layernorm over this rank's rows, gathered for the next GEMM; the
  // row-parallel sums reduce-scattered back to rows (sp_row_parallel).
  const bool sp = s.sequence_parallel;

  {
    auto p = phase("ln1");
    be_.layernorm_forward(rows(a.ln1), flat(a.ln1_mean), flat(a.ln1_rstd), rows(a.residual_in),
                          w.ln1w, w.ln1b);
  }
  // (under sequence parallelism a block keeps its rows of ln1 and ln2 only: backward gathers
  // them again, as Megatron does)
  if (sp) tp_all_gather(a.ln1, acts.sp.ln_whole);
  const Tensor ln1 = sp ? acts.sp.ln_whole : a.ln1;
  {
    auto p = phase("qkv", matmul_flops(a.qkv, ln1));
    linear_forward(rows(a.qkv), rows(ln1), w.qkvw, w.qkvb, l, 0);
  }
  attention_forward(a);
  if (sp) {
    sp_row_parallel(a.residual_mid, a.atty, w.projw, w.projb, l, 1, a.residual_in);
  } else {
    {
      auto p = phase("proj", matmul_flops(a.residual_mid, a.atty));
      linear_forward(rows(a.residual_mid), rows(a.atty), w.projw, rank0 ? w.projb : Tensor(), l, 1,
                     rank0 ? rows(a.residual_in) : Tensor());
    }
    tp_all_reduce(a.residual_mid);
  }

  {
    auto p = phase("ln2");
    be_.layernorm_forward(rows(a.ln2), flat(a.ln2_mean), flat(a.ln2_rstd), rows(a.residual_mid),
                          w.ln2w, w.ln2b);
  }
  if (layout_.dims().moe()) {  // (on this rank's rows under sequence parallelism)
    moe_forward(a, l);
    return;
  }
  if (sp) tp_all_gather(a.ln2, acts.sp.ln_whole);
  const Tensor ln2 = sp ? acts.sp.ln_whole : a.ln2;
  {
    auto p = phase("fc_gelu", matmul_flops(a.fch, ln2));
    mlp_hidden_forward(a, ln2, w.fcw, w.fcb, l);
  }
  if (sp) {
    sp_row_parallel(a.residual_out, a.fch_gelu, w.fcprojw, w.fcprojb, l, 3, a.residual_mid);
    return;
  }
  {
    auto p = phase("fc_proj", matmul_flops(a.residual_out, a.fch_gelu));
    linear_forward(rows(a.residual_out), rows(a.fch_gelu), w.fcprojw, rank0 ? w.fcprojb : Tensor(),
                   l, 3, rank0 ? rows(a.residual_mid) : Tensor());
  }
  tp_all_reduce(a.residual_out);
}

void Gpt::backward(bool grads_final) {
  TRAINER_CHECK(dloss_scale_ != 0, "backward() needs a forward() with dloss_scale != 0");
  // (the states must not move before a full recompute's reruns: they quantize as the forward did)
  TRAINER_CHECK(!fp8_ || fp8_amaxes_open_, "fp8 compute: backward() outside begin_fp8_amaxes()");
  Activations& a = *acts_;
  const GptShard& s = layout_.shard();
  GradScratch& g = a.grad;

  pass_ = "bwd";
  grads_final_ = grads_final;
  const bool embed = runs_embedding(), head = runs_head();
  if (head) {
    head_backward();
  } else if (!g.dresidual_mm.empty()) {
    // the next stage sent d(stage_output()) in fp32; the GEMMs read its bf16 rounding, which the
    // final layernorm's backward would have written along with it
    auto p = phase("round_dresidual");
    be_.round_to_bf16(g.dresidual_mm, g.dresidual);
  }
  const int first = chunk_first_layer();
  for (int l = first + s.layers_per_chunk() - 1; l >= first; --l) {
    const int unit = 1 + s.global_layer(l);
    call_before(unit, true);
    recompute_block(l);
    block_backward(l);
    call_ready(unit);
  }
  if (embed) {  // (a later pipeline stage sends stage_input_grad() back instead)
    call_before(0, true);
    if (s.sequence_parallel) tp_all_gather(g.dresidual, a.sp.dresidual);
    auto p = phase("embedding");
    embedding_backward(s.sequence_parallel ? a.sp.dresidual : g.dresidual);
  }
  if (embed || head) call_ready(0);  // wte (the last stage's is the head's)
}

void Gpt::head_backward() {
  Activations& a = *acts_;
  GradScratch& g = a.grad;
  const GptShard& s = layout_.shard();
  const int final_unit = layout_.dims().n_layer + 1;
  call_before(final_unit, true);
  {
    auto p = phase("zero_dresidual");
    be_.zero(g.dresidual);
  }
  {
    auto p = phase("head", 2 * matmul_flops(a.logits, a.lnf));
    be_.matmul_backward(rows(g.dln), weight_view("wte.weight", true), Tensor(), rows(a.logits),
                        rows(a.lnf), matmul_weight("wte.weight"));
  }
  // the vocabulary shards' partial sums: all-reduced, or reduce-scattered to this rank's rows
  Tensor dln = rows(g.dln);
  if (s.tp_size > 1 && s.sequence_parallel) {
    tp_reduce_scatter(g.dln, a.sp.dln_rows);
    dln = a.sp.dln_rows;
  } else {
    tp_all_reduce(g.dln);
  }
  const Tensor& last = a.blocks.empty() ? a.encoded : a.blocks.back().residual_out;
  {
    auto p = phase("ln_f");
    be_.layernorm_backward(rows(g.dresidual), weight_view("ln_f.weight", true),
                           weight_view("ln_f.bias", true), dln, rows(last),
                           weight_view("ln_f.weight", false), flat(a.lnf_mean), flat(a.lnf_rstd),
                           g.dresidual_mm.empty() ? Tensor() : rows(g.dresidual_mm));
  }
  call_ready(final_unit);
}

void Gpt::recompute_block(int l) {
  switch (acts_->recompute) {
    case Recompute::none:
      return;
    case Recompute::full:  // the shared buffers hold the last block run: rerun this one
      pass_ = "recompute";
      block_forward(l);
      pass_ = "bwd";
      return;
    case Recompute::selective: {  // att and atty are shared: rebuild them from this block's qkv
      BlockActivations& a = block_acts(l);
      pass_ = "recompute";
      attention_forward(a);
      pass_ = "bwd";
      return;
    }
  }
}

void Gpt::block_backward(int l) {
  Activations& acts = *acts_;
  BlockActivations& a = block_acts(l);
  GradScratch& g = acts.grad;
  const BlockWeights w = block_weights(l, false);
  const BlockWeights dw = block_weights(l, true);
  const Tensor dres = rows(g.dresidual);  // holds d(residual_out) on entry, d(residual_in) on exit
  // dres as the GEMMs read it: its bf16 rounding, which each layernorm backward writes along with
  // dres under bf16 compute; dres itself in fp32
  const Tensor dres_bf16 = g.dresidual_mm.empty() ? Tensor() : rows(g.dresidual_mm);
  // Sequence parallelism: dres holds this rank's rows; the projections' backward read it
  // gathered, and the column-parallel layers' input gradients are reduce-scattered to rows.
  // (a mixture of experts reads this rank's rows only)
  const bool sp = layout_.shard().sequence_parallel, moe = layout_.dims().moe();
  Tensor dres_mm = sp && !moe ? sp_gather_dresidual() : dres_bf16.empty() ? dres : dres_bf16;
  const Tensor dln_rows = sp ? acts.sp.dln_rows : rows(g.dln);
  const Tensor full = g.dln;  // [B,T,C], for the FLOP counts

  // MLP: residual_out = residual_mid + fcproj(gelu(fc(ln2(residual_mid))))
  // (dfch is overwritten, in the activations' dtype: Backend::matmul_gelu_backward)
  if (moe) {
    moe_backward(a, l, dln_rows);
  } else {
    {
      auto p = phase("fc_proj", 2 * matmul_flops(full, a.fch_gelu));
      be_.matmul_gelu_backward(rows(g.dfch), dw.fcprojw, dw.fcprojb, dres_mm, rows(a.fch_gelu),
                               w.fcprojw, rows(a.fch));
    }
    column_parallel_backward("fc", a.ln2, g.dfch, dw.fcw, dw.fcb, w.fcw);
  }
  {
    auto p = phase("ln2");
    be_.layernorm_backward(dres, dw.ln2w, dw.ln2b, dln_rows, rows(a.residual_mid), w.ln2w,
                           flat(a.ln2_mean), flat(a.ln2_rstd), dres_bf16);
  }
  if (sp) dres_mm = sp_gather_dresidual();  // now d(residual_mid)

  // Attention: residual_mid = residual_in + proj(attn(qkv(ln1(residual_in))))
  {
    auto p = phase("proj", 2 * matmul_flops(full, a.atty));
    be_.matmul_backward(rows(g.datty), dw.projw, dw.projb, dres_mm, rows(a.atty), w.projw);
  }
  attention_backward(a);
  column_parallel_backward("qkv", a.ln1, g.dqkv, dw.qkvw, dw.qkvb, w.qkvw);
  {
    auto p = phase("ln1");
    // (in the first block nothing reads the bf16 copy: the embedding backward reads dres)
    be_.layernorm_backward(dres, dw.ln1w, dw.ln1b, dln_rows, rows(a.residual_in), w.ln1w,
                           flat(a.ln1_mean), flat(a.ln1_rstd),
                           l > chunk_first_layer() ? dres_bf16 : Tensor());
  }
}

}  // namespace trainer::model

#include "runtime/model/activations.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace trainer::model {
namespace {

// Hands out consecutive, kActivationAlignment-aligned views of one allocation; a first pass (base
// == nullptr) only measures.
class Carver {
 public:
  Carver(char* base, DeviceType dev) : base_(base), dev_(dev) {}
  Tensor take(Shape s, DType t = DType::f32) {
    const size_t bytes = activation_footprint(static_cast<size_t>(s.numel()) * dtype_size(t));
    Tensor out(base_ ? base_ + used_ : nullptr, s, t, dev_);
    used_ += bytes;
    return out;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  DeviceType dev_;
  size_t used_ = 0;
};

// The slot buffers' rows: a block per ep rank (GptDims::expert_block_rows).
int64_t slot_rows(const ParamLayout& layout, int64_t B, int64_t T) {
  const GptShard& s = layout.shard();
  return s.ep_size * layout.dims().expert_block_rows(static_cast<int>(B), static_cast<int>(T),
                                                     static_cast<int>(T) * s.cp_size, s.ep_size);
}

// A mixture-of-experts block's tensors (BlockActivations).
void carve_experts(Carver& c, BlockActivations& b, const ParamLayout& layout, int64_t B, int64_t T,
                   DType mm) {
  const GptDims& d = layout.dims();
  const int64_t N = B * T, E = d.num_experts, K = d.top_k, C = d.d_model, FC = d.ffn_hidden();
  const int64_t S = slot_rows(layout, B, T);
  b.router_logits = c.take({N, E});
  b.moe_tables = c.take({2 * (N * K + S)}, DType::i32);
  // (the measuring pass has no memory: its views stay null)
  auto* words = static_cast<int32_t*>(b.moe_tables.data);
  auto view = [&](int64_t at, Shape shape, DType t) {
    return Tensor(words ? words + at : nullptr, shape, t, b.moe_tables.device);
  };
  b.moe_slot = view(0, {N, K}, DType::i32);
  b.moe_gate = view(N * K, {N, K}, DType::f32);
  b.moe_token = view(2 * N * K, {S}, DType::i32);
  b.moe_slot_gate = view(2 * N * K + S, {S}, DType::f32);
  b.moe_in = c.take({S, C}, mm);
  b.moe_pre = c.take({S, FC}, mm);
  b.moe_act = c.take({S, FC}, mm);
  b.moe_out = c.take({S, C});
  const bool ep = layout.shard().ep_size > 1;
  b.moe_back = ep ? c.take({S, C}) : b.moe_out;
  if (ep) {
    b.moe_rows = c.take({E}, DType::i32);
    b.moe_rows_in = c.take({E}, DType::i32);
  }
  b.routing = std::make_shared<MoeRouting>();
}

void carve_expert_scratch(Carver& c, MoeScratch& m, const ParamLayout& layout, int64_t B, int64_t T,
                          DType mm) {
  const GptDims& d = layout.dims();
  const int64_t N = B * T, E = d.num_experts, K = d.top_k, C = d.d_model, FC = d.ffn_hidden();
  const int cp = layout.shard().cp_size;
  const int64_t S = slot_rows(layout, B, T);
  const bool ep = layout.shard().ep_size > 1;
  if (ep) m.dispatch = c.take({S, C}, mm);
  m.dy = c.take({S, C}, mm);
  m.dy_experts = ep ? c.take({S, C}, mm) : m.dy;
  m.dpre = c.take({S, FC}, mm);
  m.dx = c.take({S, C});
  m.dx_tokens = ep ? c.take({S, C}) : m.dx;
  m.dgate = c.take({N, K});
  m.dlogits = c.take({N, E});
  if (cp > 1) {
    const int64_t stats = choice_stats_floats(d, static_cast<int>(B), 2);
    m.route_stats = c.take({stats});
    m.route_stats_all = c.take({cp, stats});
  }
}

// att_state: what attention keeps per layer (Backend::attention_state_shape).
// fp8_sums: carve Activations::fp8_sums too. scratch_of: take grad, sp and fp8_sums from there
// (with own_scratch false and no scratch_of: measure without them).
void carve(Carver& c, Activations& a, const ParamLayout& layout, const Shape& att_state,
           bool fp8_sums, bool own_scratch, const Activations* scratch_of) {
  const GptDims& d = layout.dims();
  const GptShard& s = layout.shard();
  const int64_t B = a.B, T = a.T, C = d.d_model, V = s.vocab_rows(d);
  const int64_t FC = d.ffn_hidden() / s.tp_size, CL = C / s.tp_size;
  const DType mm = a.matmul_input;
  // Sequence parallelism: the residual stream, the layernorms' statistics and the running
  // gradient hold this rank's rows [tp_rank * RL, (tp_rank + 1) * RL) of the B * T.
  const bool sp = s.sequence_parallel;
  const int64_t RL = sp ? B * T / s.tp_size : 0;
  const Shape stream = sp ? Shape{RL, C} : Shape{B, T, C};
  const Shape stats = sp ? Shape{RL} : Shape{B, T};
  a.inputs = c.take({B, T}, DType::i32);
  a.targets = c.take({B, T}, DType::i32);
  a.encoded = c.take(stream);  // (under sequence parallelism, reduce-scattered to rows)
  a.blocks.resize(static_cast<size_t>(s.layers_per_chunk()));  // the chunk's
  // Under recompute, the dropped tensors of every block are views of one shared set.
  BlockActivations shared;
  const bool share_all = a.recompute == Recompute::full;
  const bool share_att = a.recompute != Recompute::none;
  for (size_t l = 0; l < a.blocks.size(); ++l) {
    BlockActivations& b = a.blocks[l];
    if (l > 0 && share_all) {
      const Tensor out = c.take(stream);
      b = shared;
      b.residual_out = out;
      continue;
    }
    b.ln1 = c.take(stream, mm);
    b.ln1_mean = c.take(stats);
    b.ln1_rstd = c.take(stats);
    b.qkv = c.take({B, T, 3 * CL}, mm);
    // selective recompute rebuilds att and atty together (one attention_forward): share both
    b.atty = l > 0 && share_att ? shared.atty : c.take({B, T, CL}, mm);
    b.att = l > 0 && share_att ? shared.att : c.take(att_state);
    b.residual_mid = c.take(stream);
    b.ln2 = c.take(stream, mm);
    b.ln2_mean = c.take(stats);
    b.ln2_rstd = c.take(stats);
    if (d.moe()) {  // (the sequences of this rank's rows)
      carve_experts(c, b, layout, s.row_sequences(a.B), T, mm);
    } else {
      b.fch = c.take({B, T, FC}, mm);
      b.fch_gelu = c.take({B, T, FC}, mm);
    }
    b.residual_out = c.take(stream);
    if (l == 0) shared = b;
  }
  for (size_t l = 0; l < a.blocks.size(); ++l)
    a.blocks[l].residual_in = l == 0 ? a.encoded : a.blocks[l - 1].residual_out;
  if (s.has_head && a.with_head) {
    a.lnf = c.take({B, T, C}, mm);
    a.lnf_mean = c.take(stats);
    a.lnf_rstd = c.take(stats);
    a.logits = c.take({B, T, V}, mm);
    a.losses = c.take({B, T});
    if (s.tp_size > 1) {
      a.ce_stats = c.take({B * T, 3});
      a.ce_all_stats = c.take({s.tp_size, B * T, 3});
    }
  }
  if (!own_scratch) {  // a pipeline stage's later slot: the first slot's scratch
    if (scratch_of != nullptr) {
      a.grad = scratch_of->grad;
      a.sp = scratch_of->sp;
      a.fp8_sums = scratch_of->fp8_sums;
      a.cp = scratch_of->cp;
      a.moe = scratch_of->moe;
    }
    return;
  }
  a.grad.dresidual = c.take(stream);
  if (mm == DType::bf16) a.grad.dresidual_mm = c.take(stream, mm);
  a.grad.dln = c.take({B, T, C});
  a.grad.dqkv = c.take({B, T, 3 * CL}, mm);  // qkv's dtype: the qkv GEMMs read it with no cast
  a.grad.datty = c.take({B, T, CL});
  if (d.moe())
    carve_expert_scratch(c, a.moe, layout, s.row_sequences(a.B), T, mm);
  else
    a.grad.dfch = c.take({B, T, FC}, mm);
  if (sp) {
    a.sp.ln_rows = c.take(stream, mm);
    a.sp.ln_whole = c.take({B, T, C}, mm);
    // grad.dln's memory: a row-parallel layer's partial sums live only in a forward (or a
    // recompute, before its block's backward), the gathered gradient only between a layernorm
    // backward and the next GEMM, dln only from a column-parallel backward to its reduce-scatter
    a.sp.partial = a.grad.dln;
    a.sp.dresidual = a.grad.dln;
    if (mm == DType::bf16) a.sp.dresidual_mm = c.take({B, T, C}, mm);
    a.sp.dln_rows = c.take(stream);
  }
  if (fp8_sums) a.fp8_sums = c.take({B, T, FC});
  if (s.cp_size > 1) {
    a.cp.qkv_all = c.take({s.cp_size, B, T, 3 * CL}, mm);
    a.cp.dqkv_all = c.take({s.cp_size, B, T, 3 * CL});
    if (mm == DType::bf16) a.cp.dqkv_rows = c.take({B, T, 3 * CL});
  }
}

}  // namespace

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  TRAINER_CHECK(false,
                "activation_checkpointing = '" << name << "': allowed are none, selective, full");
  return Recompute::none;
}

Shape Activations::attention_state(const Backend& be, const ParamLayout& layout, int B, int T) {
  const GptShard& s = layout.shard();
  const int64_t heads = layout.dims().n_head / s.tp_size;
  if (s.cp_size > 1)
    return be.attention_cp_state_shape(B, heads, T, int64_t{T} * s.cp_size,
                                       layout.dims().head_dim());
  return be.attention_state_shape(B, heads, T, layout.dims().head_dim());
}

Activations::Activations(Backend& be, const ParamLayout& layout, int b, int t, Recompute r,
                         DType matmul_input_dtype, bool fp8_sums, const Activations* scratch_of,
                         bool head)
    : B(b), T(t), recompute(r), matmul_input(matmul_input_dtype), with_head(head), be_(&be) {
  TRAINER_CHECK(matmul_input == DType::f32 || matmul_input == DType::bf16,
                "activations: matmul inputs must be f32 or bf16");
  const Shape att_state = attention_state(be, layout, B, T);
  TRAINER_CHECK(scratch_of == nullptr || (scratch_of->B == B && scratch_of->T == T &&
                                          scratch_of->matmul_input == matmul_input),
                "activations share the scratch of a set of another shape");
  const bool own = scratch_of == nullptr;
  bytes_ = bytes_needed(layout, B, T, recompute, matmul_input, att_state, fp8_sums, own, with_head);
  memory_ = be_->alloc(bytes_);
  Carver real(static_cast<char*>(memory_), be.device());
  carve(real, *this, layout, att_state, fp8_sums, own, scratch_of);
}

Activations::Activations(int b, int t, Recompute r, DType matmul_input_dtype, bool head)
    : B(b), T(t), recompute(r), matmul_input(matmul_input_dtype), with_head(head) {}

size_t Activations::bytes_needed(const ParamLayout& layout, int B, int T, Recompute recompute,
                                 DType matmul_input, const Shape& attention_state, bool fp8_sums,
                                 bool own_scratch, bool with_head) {
  Activations shape_only(B, T, recompute, matmul_input, with_head);
  Carver measure(nullptr, DeviceType::cpu);
  carve(measure, shape_only, layout, attention_state, fp8_sums, own_scratch, nullptr);
  return measure.used();
}

Activations::~Activations() {
  if (be_) be_->free(memory_);
}

}  // namespace trainer::model

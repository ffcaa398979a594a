// Gpt: the mixture-of-experts MLP of a block (GptDims::moe()). The router's GEMM runs on the
// backend, its token choice on the host (moe_router.h), the token rows move to the experts'
// slots and back through Backend::moe_*, and, under expert parallelism, between ranks through
// Hooks::ep_all_to_all. Each expert's MLP is the dense block's: fc, GELU, proj.
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/model/gpt.h"
#include "runtime/model/moe_router.h"
#include "runtime/model/tensor_views.h"

namespace trainer::model {
namespace {

std::string block_prefix(const GptShard& s, int local_layer) {
  return "h." + std::to_string(s.global_layer(local_layer)) + ".mlp.";
}

// Expert `e` (local index) of a stacked [E/ep, ...] tensor, as a [rows, cols] matrix or a
// [rows] vector.
Tensor expert_part(const Tensor& stacked, int e) {
  const int64_t per = stacked.numel() / stacked.shape[0];
  Shape s;
  for (int i = 1; i < stacked.shape.rank; ++i)
    s.dims[static_cast<size_t>(s.rank++)] = stacked.shape[i];
  return stacked.slice(e * per, per).view(s);
}

// Rows [first, first + n) of a [S, width] tensor.
Tensor slot_rows(const Tensor& t, int64_t first, int64_t n) {
  const int64_t width = t.shape[1];
  return t.slice(first * width, n * width).view({n, width});
}

// Calls f(local expert e, part) for each run of the expert side's rows that holds tokens, where
// part(t) is the run's rows of a [S, width] tensor t. The expert side is a block of rows per ep
// rank (GptDims::expert_block_rows), each holding, from its start, the rows that ep rank sent
// to this rank's experts, expert after expert (MoeRouting::expert_rows_in; pack_expert_slots):
// the GEMMs skip the empty rest.
template <class F>
void for_each_expert_run(const BlockActivations& a, int local_experts, F&& f) {
  const std::vector<int32_t>& used = a.routing->expert_rows_in;  // [ep, local experts]
  const int64_t ranks = static_cast<int64_t>(used.size()) / local_experts;
  const int64_t block = a.moe_in.shape[0] / ranks;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    int64_t first = rank * block;
    for (int e = 0; e < local_experts; ++e) {
      const int64_t rows_used = used[static_cast<size_t>(rank * local_experts + e)];
      if (rows_used > 0) f(e, [&](const Tensor& t) { return slot_rows(t, first, rows_used); });
      first += rows_used;
    }
  }
}

// The forward FLOPs of the experts' two GEMMs over the slots in use (backward: twice).
double expert_flops(const BlockActivations& a) {
  int64_t rows = 0;
  for (int32_t n : a.routing->expert_rows_in) rows += n;
  return 4.0 * static_cast<double>(rows) * static_cast<double>(a.moe_in.shape[1]) *
         static_cast<double>(a.moe_pre.shape[1]);
}

}  // namespace

double Gpt::take_moe_balance_loss() {
  const double v = moe_balance_loss_;
  moe_balance_loss_ = 0;
  return v;
}

int64_t Gpt::take_moe_dropped() {
  const int64_t v = moe_dropped_;
  moe_dropped_ = 0;
  return v;
}

void Gpt::ep_all_to_all(const Tensor& send, Tensor recv) {
  TRAINER_CHECK(hooks_.ep_all_to_all, "expert parallelism without an ep all-to-all hook");
  auto p = phase("ep_all_to_all");
  hooks_.ep_all_to_all(send, recv);
}

void Gpt::ep_all_to_all_rows(const Tensor& send, Tensor recv, const std::vector<int64_t>& send_rows,
                             const std::vector<int64_t>& recv_rows) {
  TRAINER_CHECK(hooks_.ep_all_to_all_rows, "expert parallelism without an ep all-to-all hook");
  auto p = phase("ep_all_to_all");
  hooks_.ep_all_to_all_rows(send, recv, send_rows, recv_rows);
}

void Gpt::route(BlockActivations& a) {
  const GptShard& s = layout_.shard();
  const int T = acts_->T, cp = s.cp_size;
  MoeRouting& r = *a.routing;
  const MoeScratch& m = acts_->moe;
  {
    auto p = phase("routing");  // waits for the router: the host reads its logits
    std::vector<float> logits(static_cast<size_t>(a.router_logits.numel()));
    be_.to_host(logits.data(), a.router_logits);
    if (cp == 1) {
      r = route_tokens(logits.data(), layout_.dims(), s.row_sequences(acts_->B), T);
      return;
    }
    r = route_choices(logits.data(), layout_.dims(), s.row_sequences(acts_->B), T, T * cp);
    be_.from_host(m.route_stats, choice_stats(r, 2).data());
  }
  // the capacity and the balance loss count the whole sequence: the cp ranks' choice counts
  cp_all_gather(m.route_stats, m.route_stats_all);
  auto p = phase("routing");
  std::vector<float> all(static_cast<size_t>(m.route_stats_all.numel()));
  be_.to_host(all.data(), m.route_stats_all);
  assign_slots(r, all.data(), SequenceChunks::context_parallel(s.cp_rank, cp));
}

void Gpt::moe_forward(BlockActivations& a, int l) {
  const GptDims& d = layout_.dims();
  const std::string h = block_prefix(layout_.shard(), l);
  Activations& acts = *acts_;
  {
    auto p = phase("router", matmul_flops(a.router_logits, a.ln2));
    be_.matmul_forward(a.router_logits, rows(a.ln2), matmul_weight(h + "router.weight"), Tensor());
  }
  route(a);
  const int ep_size = layout_.shard().ep_size;
  {
    auto p = phase("routing");
    MoeRouting& r = *a.routing;
    pack_expert_slots(r, ep_size);  // each ep rank's rows in one run, sent as one transfer
    // the four tables in one upload (a device waits for each): slot, gate, token, slot gate
    std::vector<int32_t> tables(static_cast<size_t>(a.moe_tables.numel()));
    int32_t* at = tables.data();
    for (const auto& [data, n] : {std::pair<const void*, size_t>{r.slot.data(), r.slot.size()},
                                  {r.gate.data(), r.gate.size()},
                                  {r.token_of_slot.data(), r.token_of_slot.size()},
                                  {r.slot_gate.data(), r.slot_gate.size()}}) {
      std::memcpy(at, data, n * 4);
      at += n;
    }
    be_.from_host(a.moe_tables, tables.data());
    if (std::strcmp(pass_, "fwd") == 0) {  // (not again in a full recompute)
      moe_balance_loss_ += d.aux_loss_coef * r.balance_loss_sum;
      moe_dropped_ += r.dropped;
    }
  }
  const bool ep = ep_size > 1;
  MoeRouting& r = *a.routing;
  r.rows_from_rank = r.rows_to_rank;
  if (ep) {  // how many slots of each of this rank's experts every ep rank fills
    be_.from_host(a.moe_rows, r.expert_rows.data());
    ep_all_to_all(a.moe_rows, a.moe_rows_in);
    be_.to_host(r.expert_rows_in.data(), a.moe_rows_in);
    const size_t local = r.expert_rows_in.size() / static_cast<size_t>(ep_size);
    for (size_t i = 0; i < r.rows_from_rank.size(); ++i)
      r.rows_from_rank[i] = std::accumulate(r.expert_rows_in.begin() + i * local,
                                            r.expert_rows_in.begin() + (i + 1) * local, int64_t{0});
  }
  {
    auto p = phase("moe_dispatch");
    be_.moe_gather_rows(ep ? acts.moe.dispatch : a.moe_in, rows(a.ln2), a.moe_token, Tensor());
  }
  if (ep) ep_all_to_all_rows(acts.moe.dispatch, a.moe_in, r.rows_to_rank, r.rows_from_rank);
  experts_forward(a, l);
  if (ep) ep_all_to_all_rows(a.moe_out, a.moe_back, r.rows_from_rank, r.rows_to_rank);
  auto p = phase("moe_combine");
  be_.copy(a.residual_out, a.residual_mid);
  be_.moe_combine_rows(rows(a.residual_out), a.moe_back, a.moe_slot, a.moe_gate);
}

void Gpt::experts_forward(BlockActivations& a, int l) {
  const std::string h = block_prefix(layout_.shard(), l) + "experts.";
  const Tensor fcw = matmul_weight(h + "c_fc.weight"), fcb = weight_view(h + "c_fc.bias", false);
  const Tensor pw = matmul_weight(h + "c_proj.weight"), pb = weight_view(h + "c_proj.bias", false);
  auto p = phase("experts", expert_flops(a));
  for_each_expert_run(a, static_cast<int>(fcw.shape[0]), [&](int e, auto part) {
    if (!fp8_) {
      be_.matmul_gelu_forward(part(a.moe_act), part(a.moe_pre), part(a.moe_in), expert_part(fcw, e),
                              expert_part(fcb, e));
      be_.matmul_forward(part(a.moe_out), part(a.moe_act), expert_part(pw, e), expert_part(pb, e));
      return;
    }
    // fp8, each expert with its own two scaling states (every run of an expert, one per ep rank
    // that sent it tokens, raises the same amaxes): the fc GEMM's fp32 sums, then the same two
    // roundings as the fused op's (mlp_hidden_forward)
    const Tensor pre = part(a.moe_pre), sum = fp8_sums(pre.shape);
    fp8_linear_forward(sum, part(a.moe_in), expert_part(fcw, e), expert_part(fcb, e),
                       fp8_expert_linear(l, e, 0));
    be_.round_to_bf16(pre, sum);
    be_.gelu_forward(part(a.moe_act), sum);
    fp8_linear_forward(part(a.moe_out), part(a.moe_act), expert_part(pw, e), expert_part(pb, e),
                       fp8_expert_linear(l, e, 1));
  });
}

void Gpt::moe_backward(BlockActivations& a, int l, const Tensor& dln) {
  const GptDims& d = layout_.dims();
  Activations& acts = *acts_;
  GradScratch& g = acts.grad;
  MoeScratch& m = acts.moe;
  const bool ep = layout_.shard().ep_size > 1;
  const Tensor dres = rows(g.dresidual);  // d(residual_out); the residual passes it on as it is
  {
    auto p = phase("moe_combine");
    be_.moe_gate_grad(m.dgate, dres, a.moe_back, a.moe_slot);
    be_.moe_gather_rows(m.dy, dres, a.moe_token, a.moe_slot_gate);  // gate * d(residual_out)
  }
  const std::vector<int64_t>&to = a.routing->rows_to_rank, &from = a.routing->rows_from_rank;
  if (ep) ep_all_to_all_rows(m.dy, m.dy_experts, to, from);
  experts_backward(a, l);
  if (ep) ep_all_to_all_rows(m.dx, m.dx_tokens, from, to);
  const std::string h = block_prefix(layout_.shard(), l);
  {
    auto p = phase("routing");
    const MoeRouting& r = *a.routing;
    std::vector<float> dgate(static_cast<size_t>(m.dgate.numel()));
    std::vector<float> dlogits(static_cast<size_t>(m.dlogits.numel()));
    be_.to_host(dgate.data(), m.dgate);
    // the balance loss of each sequence weighs 1 / (sequences in the global batch) = dloss_scale
    // times its tokens (all of them, under context parallelism too)
    router_backward(r, dgate.data(), d.aux_loss_coef * double{dloss_scale_} * r.sequence_T,
                    dlogits.data());
    be_.from_host(m.dlogits, dlogits.data());
  }
  {
    auto p = phase("router", 2 * matmul_flops(a.router_logits, a.ln2));
    be_.matmul_backward(dln, weight_view(h + "router.weight", true), Tensor(), m.dlogits,
                        rows(a.ln2), matmul_weight(h + "router.weight"));
  }
  auto p = phase("moe_dispatch");
  be_.moe_combine_rows(dln, m.dx_tokens, a.moe_slot, Tensor());
}

void Gpt::experts_backward(BlockActivations& a, int l) {
  MoeScratch& m = acts_->moe;
  const std::string h = block_prefix(layout_.shard(), l) + "experts.";
  const Tensor fcw = matmul_weight(h + "c_fc.weight"), pw = matmul_weight(h + "c_proj.weight");
  const Tensor dfcw = weight_view(h + "c_fc.weight", true),
               dfcb = weight_view(h + "c_fc.bias", true);
  const Tensor dpw = weight_view(h + "c_proj.weight", true),
               dpb = weight_view(h + "c_proj.bias", true);
  auto p = phase("experts", 2 * expert_flops(a));
  for_each_expert_run(a, static_cast<int>(fcw.shape[0]), [&](int e, auto part) {
    be_.matmul_gelu_backward(part(m.dpre), expert_part(dpw, e), expert_part(dpb, e),
                             part(m.dy_experts), part(a.moe_act), expert_part(pw, e),
                             part(a.moe_pre));
    be_.matmul_backward(part(m.dx), expert_part(dfcw, e), expert_part(dfcb, e), part(m.dpre),
                        part(a.moe_in), expert_part(fcw, e));
  });
}

}  // namespace trainer::model

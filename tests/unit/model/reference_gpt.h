#pragma once
// A straight-line GPT forward in any scalar type over the same flat parameter layout as
// model::Gpt, built from the cpu backend's templated reference ops. Tests run it in double as
// the ground truth for finite differences.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/cpu/ops.h"
#include "runtime/model/param_layout.h"

namespace trainer::testing {

// A mixture-of-experts MLP written out token by token (the rules of runtime/model/moe_router.h,
// implemented anew): out[N,C] = sum over each token's kept top_k choices of gate * expert(ln).
// Returns aux_loss_coef times the mean over sequences of the load-balancing loss.
template <class Real>
Real reference_moe_mlp(Real* out, const Real* ln, const model::ParamLayout& layout,
                       const std::vector<Real>& params, const std::string& prefix, int64_t B,
                       int64_t T) {
  const model::GptDims& d = layout.dims();
  const int64_t C = d.d_model, FC = d.ffn_hidden(), E = d.num_experts, K = d.top_k;
  auto p = [&](const std::string& name) {
    return params.data() + layout.find(prefix + name).offset;
  };
  const Real* router = p("router.weight");
  const int64_t capacity = d.expert_capacity(static_cast<int>(T));
  std::vector<Real> probs(static_cast<size_t>(E)), hidden(static_cast<size_t>(FC)),
      act(hidden.size()), y(static_cast<size_t>(C));
  Real aux = 0;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<Real>> prob_rows;
    std::vector<std::vector<int64_t>> choice(static_cast<size_t>(T));
    std::vector<std::vector<Real>> gate(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const Real* x = ln + (b * T + t) * C;
      for (int64_t e = 0; e < E; ++e) {
        Real z = 0;
        for (int64_t c = 0; c < C; ++c) z += router[e * C + c] * x[c];
        probs[static_cast<size_t>(e)] = z;
      }
      Real top = probs[0], total = 0;
      for (Real z : probs) top = std::max(top, z);
      for (Real& z : probs) total += (z = std::exp(z - top));
      for (Real& z : probs) z /= total;
      prob_rows.push_back(probs);
      std::vector<int64_t> order(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
        return probs[static_cast<size_t>(i)] > probs[static_cast<size_t>(j)];
      });
      Real chosen = 0;
      for (int64_t k = 0; k < K; ++k)
        chosen += probs[static_cast<size_t>(order[static_cast<size_t>(k)])];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = order[static_cast<size_t>(k)];
        choice[static_cast<size_t>(t)].push_back(e);
        gate[static_cast<size_t>(t)].push_back(K == 1 ? probs[static_cast<size_t>(e)]
                                                      : probs[static_cast<size_t>(e)] / chosen);
      }
    }
    for (int64_t i = 0; i < T * C; ++i) out[b * T * C + i] = 0;
    std::vector<int64_t> used(static_cast<size_t>(E)), picked(static_cast<size_t>(E));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t e = choice[static_cast<size_t>(t)][static_cast<size_t>(k)];
        ++picked[static_cast<size_t>(e)];
        if (used[static_cast<size_t>(e)]++ >= capacity) continue;  // dropped
        const Real* x = ln + (b * T + t) * C;
        cpu::matmul_forward(hidden.data(), x, p("experts.c_fc.weight") + e * FC * C,
                            p("experts.c_fc.bias") + e * FC, int64_t{1}, C, FC);
        cpu::gelu_forward(act.data(), hidden.data(), FC);
        cpu::matmul_forward(y.data(), act.data(), p("experts.c_proj.weight") + e * C * FC,
                            p("experts.c_proj.bias") + e * C, int64_t{1}, FC, C);
        const Real g = gate[static_cast<size_t>(t)][static_cast<size_t>(k)];
        for (int64_t c = 0; c < C; ++c) out[(b * T + t) * C + c] += g * y[static_cast<size_t>(c)];
      }
    Real balance = 0;
    for (int64_t e = 0; e < E; ++e) {
      Real mean_prob = 0;
      for (int64_t t = 0; t < T; ++t)
        mean_prob += prob_rows[static_cast<size_t>(t)][static_cast<size_t>(e)];
      balance += Real(E) * Real(picked[static_cast<size_t>(e)]) / Real(T * K) * mean_prob / Real(T);
    }
    aux += Real(d.aux_loss_coef) * balance / Real(B);
  }
  return aux;
}

template <class Real>
Real reference_gpt_loss(const model::ParamLayout& layout, const std::vector<Real>& params,
                        const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                        int64_t B, int64_t T) {
  const model::GptDims& d = layout.dims();
  const int64_t C = d.d_model, V = d.vocab, FC = d.ffn_hidden(), N = B * T;
  auto p = [&](const std::string& name) { return params.data() + layout.find(name).offset; };
  std::vector<Real> x(static_cast<size_t>(N * C)), ln(x.size()), mid(x.size()), tmp(x.size());
  std::vector<Real> qkv(static_cast<size_t>(N * 3 * C)), atty(x.size());
  std::vector<Real> att(static_cast<size_t>(B * d.n_head * T * T));
  std::vector<Real> fch(static_cast<size_t>(N * FC)), fchg(fch.size());
  cpu::embedding_forward(x.data(), inputs.data(), p("wte.weight"), p("wpe.weight"), 0, B, T, C);
  Real aux = 0;  // mixture of experts: the load-balancing losses
  for (int l = 0; l < d.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    cpu::layernorm_forward(ln.data(), (Real*)nullptr, (Real*)nullptr, x.data(),
                           p(h + "ln_1.weight"), p(h + "ln_1.bias"), N, C);
    cpu::matmul_forward(qkv.data(), ln.data(), p(h + "attn.c_attn.weight"),
                        p(h + "attn.c_attn.bias"), N, C, 3 * C);
    cpu::attention_forward(atty.data(), att.data(), qkv.data(), B, T, C, int64_t{d.n_head});
    cpu::matmul_forward(tmp.data(), atty.data(), p(h + "attn.c_proj.weight"),
                        p(h + "attn.c_proj.bias"), N, C, C);
    for (size_t i = 0; i < x.size(); ++i) mid[i] = x[i] + tmp[i];
    cpu::layernorm_forward(ln.data(), (Real*)nullptr, (Real*)nullptr, mid.data(),
                           p(h + "ln_2.weight"), p(h + "ln_2.bias"), N, C);
    if (d.moe()) {
      aux += reference_moe_mlp<Real>(tmp.data(), ln.data(), layout, params, h + "mlp.", B, T);
      for (size_t i = 0; i < x.size(); ++i) x[i] = mid[i] + tmp[i];
      continue;
    }
    cpu::matmul_forward(fch.data(), ln.data(), p(h + "mlp.c_fc.weight"), p(h + "mlp.c_fc.bias"), N,
                        C, FC);
    cpu::gelu_forward(fchg.data(), fch.data(), N * FC);
    cpu::matmul_forward(tmp.data(), fchg.data(), p(h + "mlp.c_proj.weight"),
                        p(h + "mlp.c_proj.bias"), N, FC, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] = mid[i] + tmp[i];
  }
  cpu::layernorm_forward(ln.data(), (Real*)nullptr, (Real*)nullptr, x.data(), p("ln_f.weight"),
                         p("ln_f.bias"), N, C);
  std::vector<Real> logits(static_cast<size_t>(N * V)), losses(static_cast<size_t>(N));
  cpu::matmul_forward(logits.data(), ln.data(), p("wte.weight"), (const Real*)nullptr, N, C, V);
  cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, Real(0));
  Real sum = 0;
  for (Real v : losses) sum += v;
  return sum / Real(N) + aux;
}

}  // namespace trainer::testing

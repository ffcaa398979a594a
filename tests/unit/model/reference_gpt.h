#pragma once
// A straight-line GPT forward in any scalar type over the same flat parameter layout as
// model::Gpt, built from the cpu backend's templated reference ops. Tests run it in double as
// the ground truth for finite differences.
#include <string>
#include <vector>

#include "runtime/cpu/ops.h"
#include "runtime/model/param_layout.h"

namespace trainer::testing {

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
  return sum / Real(N);
}

}  // namespace trainer::testing

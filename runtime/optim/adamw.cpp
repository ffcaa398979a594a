#include "runtime/optim/adamw.h"

#include <algorithm>

namespace trainer::optim {

std::vector<DecayRun> decay_runs(const model::ParamLayout& layout, int64_t begin, int64_t end) {
  std::vector<DecayRun> runs;
  for (const auto& p : layout.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    if (!runs.empty() && runs.back().decay == p.weight_decay &&
        runs.back().offset + runs.back().numel == lo) {
      runs.back().numel += hi - lo;
    } else {
      runs.push_back({lo, hi - lo, p.weight_decay});
    }
  }
  return runs;
}

AdamW::AdamW(Backend& be, const model::ParamLayout& layout, int64_t begin, int64_t end)
    : be_(be), begin_(begin), end_(end), runs_(decay_runs(layout, begin, end)) {
  const int64_t n = end - begin;
  m_ = Tensor(be_.alloc(static_cast<size_t>(n) * 4), {n}, DType::f32, be_.device());
  v_ = Tensor(be_.alloc(static_cast<size_t>(n) * 4), {n}, DType::f32, be_.device());
  be_.zero(m_);
  be_.zero(v_);
}

AdamW::~AdamW() {
  be_.free(m_.data);
  be_.free(v_.data);
}

void AdamW::step(Tensor params, const Tensor& grads, float lr, float beta1, float beta2, float eps,
                 float weight_decay, Tensor params_bf16, float grad_scale) {
  ++t_;
  for (const DecayRun& r : runs_) {
    const int64_t off = r.offset - begin_;
    AdamWParams p{lr, beta1, beta2, eps, r.decay ? weight_decay : 0.0f, t_, grad_scale};
    be_.adamw_step(params.slice(off, r.numel), grads.slice(off, r.numel), m_.slice(off, r.numel),
                   v_.slice(off, r.numel), p, params_bf16.slice(off, r.numel));
  }
}

}  // namespace trainer::optim

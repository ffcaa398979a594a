#include "runtime/parallel/tp_grad_norm.h"

#include <algorithm>

namespace trainer::parallel {

double tp_weighted_sum_squares(Backend& be, const model::ParamLayout& layout, const Tensor& grads,
                               int64_t begin, bool dense_sharded) {
  const int tp = layout.shard().tp_size, ep = dense_sharded ? 1 : layout.shard().ep_size;
  const bool tied_copy = layout.shard().has_head && !layout.shard().has_embedding;
  if (tp == 1 && ep == 1 && !tied_copy) return be.sum_squares(grads);
  const int64_t end = begin + grads.numel();
  enum Kind { split, replicated, uncounted };
  double sums[3] = {0, 0, 0};
  // Runs of consecutive tensors of one kind, one sum each (a block alternates a few times).
  int64_t run_begin = begin;
  Kind run_kind = split;
  auto flush = [&](int64_t run_end) {
    if (run_end <= run_begin || run_kind == uncounted) return;
    sums[run_kind] += be.sum_squares(grads.slice(run_begin - begin, run_end - run_begin));
  };
  for (const model::ParamSpec& p : layout.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    // (mixture-of-experts blocks run at tp 1: a tensor is replicated over tp or over ep, not both)
    const Kind kind = p.tied_copy                                            ? uncounted
                      : (p.tp_replicated && tp > 1) || (!p.expert && ep > 1) ? replicated
                                                                             : split;
    if (kind != run_kind) {
      flush(lo);
      run_begin = lo;
      run_kind = kind;
    }
  }
  flush(end);
  return sums[split] + sums[replicated] / (tp * ep);
}

void sum_row_partial_grads(const model::ParamLayout& layout, Tensor grads, int64_t begin,
                           dist::Comm& tp) {
  const int64_t end = begin + grads.numel();
  int64_t run_begin = -1, run_end = -1;  // consecutive such tensors, one all-reduce
  auto flush = [&] {
    if (run_end > run_begin)
      tp.all_reduce(grads.slice(run_begin - begin, run_end - run_begin).data,
                    static_cast<size_t>(run_end - run_begin), dist::CommDType::f32,
                    dist::ReduceOp::sum);
    run_begin = run_end = -1;
  };
  for (const model::ParamSpec& p : layout.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi || !p.grad_sums_over_tp) continue;
    if (lo != run_end) flush();
    if (run_begin < 0) run_begin = lo;
    run_end = hi;
  }
  flush();
}

}  // namespace trainer::parallel

#include "runtime/parallel/tp_grad_norm.h"

#include <algorithm>

namespace trainer::parallel {

double tp_weighted_sum_squares(Backend& be, const model::ParamLayout& layout, const Tensor& grads,
                               int64_t begin, bool dense_sharded) {
  const int tp = layout.shard().tp_size, ep = dense_sharded ? 1 : layout.shard().ep_size;
  const bool tied_copy = layout.shard().has_head && !layout.shard().has_embedding;
  if (tp == 1 && ep == 1 && !tied_copy) return be.sum_squares(grads);
  const int64_t end = begin + grads.numel();
  // A tensor's copies: tp when every tp rank holds it whole, times ep when every ep rank does (a
  // mixture of experts' router and experts are whole on each tp rank, the experts split over ep);
  // 0: not counted. Runs of consecutive tensors of one weight, one sum each.
  auto copies = [&](const model::ParamSpec& p) {
    if (p.tied_copy) return 0;
    return (p.tp_replicated ? tp : 1) * (p.expert ? 1 : ep);
  };
  double sum = 0;
  int64_t run_begin = begin;
  int run_copies = 1;
  auto flush = [&](int64_t run_end) {
    if (run_end <= run_begin || run_copies == 0) return;
    sum += be.sum_squares(grads.slice(run_begin - begin, run_end - run_begin)) / run_copies;
  };
  for (const model::ParamSpec& p : layout.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    const int c = copies(p);
    if (c != run_copies) {
      flush(lo);
      run_begin = lo;
      run_copies = c;
    }
  }
  flush(end);
  return sum;
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

#pragma once
// The gradient's sum of squares under tensor parallelism: a tp rank holds its slice of the
// split tensors and a whole copy of the others (norms, row-parallel biases, embeddings), whose
// gradients are the same on every tp rank. Each of those is counted 1/tp on every rank, so that
// the sum over the tp group counts it once, as the single-process model does. Under pipeline
// parallelism the last stage's copy of wte (ParamSpec::tied_copy) counts 0: the first stage's
// counts. Under expert parallelism the same holds for the ep group: each rank holds its experts,
// and a copy of every other tensor, counted 1/ep (a tensor whole on every tp and ep rank: 1/(tp
// ep)).
#include <cstdint>

#include "runtime/core/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/model/param_layout.h"

namespace trainer::parallel {

// Sum of squares of `grads`, which holds the flat gradient elements [begin, begin + numel) of
// `layout`'s buffer, weighted as above (plain Backend::sum_squares at tp 1). dense_sharded: the
// ep ranks hold disjoint shards of the dense tensors' gradients (ZeRO), which count whole.
double tp_weighted_sum_squares(Backend& be, const model::ParamLayout& layout, const Tensor& grads,
                               int64_t begin, bool dense_sharded = false);

// Sequence parallelism: sums over the tp group the gradients each tp rank holds for its rows only
// (ParamSpec::grad_sums_over_tp: the layernorms'), among the flat elements `grads` holds (from
// `begin`), so that they are whole, and the same on every tp rank. Call once per step, after the
// dp reduction (a sum too, so the order does not matter) and before the norm.
void sum_row_partial_grads(const model::ParamLayout& layout, Tensor grads, int64_t begin,
                           dist::Comm& tp);

}  // namespace trainer::parallel

// Gpt's communication inside a sharded model, through the hooks the parallel layer sets: tensor
// parallelism's all-reduce, sequence parallelism's gather and scatter of the rows, the vocabulary
// split of the embedding's inputs, and context parallelism's gather of the keys and values.
#include "runtime/core/check.h"
#include "runtime/model/gpt.h"
#include "runtime/model/tensor_views.h"

namespace trainer::model {

void Gpt::tp_all_reduce(Tensor t) {
  if (!hooks_.tp_all_reduce) return;
  auto p = phase("tp_all_reduce");
  hooks_.tp_all_reduce(t);
}

void Gpt::tp_all_gather(const Tensor& rows_in, Tensor whole) {
  TRAINER_CHECK(hooks_.tp_all_gather, "sequence parallelism without a tp all-gather hook");
  auto p = phase("tp_all_gather");
  hooks_.tp_all_gather(rows_in, whole);
}

void Gpt::tp_reduce_scatter(const Tensor& whole, Tensor rows_out) {
  TRAINER_CHECK(hooks_.tp_reduce_scatter, "sequence parallelism without a tp reduce-scatter hook");
  auto p = phase("tp_reduce_scatter");
  hooks_.tp_reduce_scatter(whole, rows_out);
}

Tensor Gpt::sp_rows(const Tensor& whole) const {
  const GptShard& s = layout_.shard();
  const int64_t C = whole.shape[whole.shape.rank - 1], RL = whole.numel() / C / s.tp_size;
  return whole.slice(s.tp_rank * RL * C, RL * C).view({RL, C});
}

void Gpt::sp_row_parallel(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                          int l, int which, const Tensor& residual) {
  const Tensor partial = acts_->sp.partial;
  {
    auto p = phase(which == 1 ? "proj" : "fc_proj", matmul_flops(partial, inp));
    linear_forward(rows(partial), rows(inp), weight, layout_.shard().tp_rank == 0 ? bias : Tensor(),
                   l, which);
    be_.axpy(sp_rows(partial), rows(residual), 1.0f);
  }
  tp_reduce_scatter(partial, out);
}

void Gpt::column_parallel_backward(const char* op, const Tensor& ln, const Tensor& dout,
                                   Tensor dweight, Tensor dbias, const Tensor& weight) {
  Activations& acts = *acts_;
  const bool sp = layout_.shard().sequence_parallel;
  if (sp) tp_all_gather(ln, acts.sp.ln_whole);
  const Tensor inp = sp ? acts.sp.ln_whole : ln;
  const Tensor dln = acts.grad.dln;
  {
    auto p = phase(op, 2 * matmul_flops(dout, inp));
    be_.matmul_backward(rows(dln), dweight, dbias, rows(dout), rows(inp), weight);
  }
  if (sp)
    tp_reduce_scatter(dln, acts.sp.dln_rows);
  else
    tp_all_reduce(dln);
}

Tensor Gpt::sp_gather_dresidual() {
  const GradScratch& g = acts_->grad;
  if (g.dresidual_mm.empty()) {
    tp_all_gather(g.dresidual, acts_->sp.dresidual);
    return rows(acts_->sp.dresidual);
  }
  tp_all_gather(g.dresidual_mm, acts_->sp.dresidual_mm);
  return rows(acts_->sp.dresidual_mm);
}

const int32_t* Gpt::vocab_inputs(const int32_t* inputs) {
  const GptShard& s = layout_.shard();
  if (s.tp_size == 1) return inputs;
  const int64_t start = s.vocab_start(layout_.dims()), rows = s.vocab_rows(layout_.dims());
  shard_inputs_.resize(static_cast<size_t>(acts_->inputs.numel()));
  for (size_t i = 0; i < shard_inputs_.size(); ++i) {
    const int64_t local = int64_t{inputs[i]} - start;
    shard_inputs_[i] = local >= 0 && local < rows ? static_cast<int32_t>(local) : -1;
  }
  return shard_inputs_.data();
}

void Gpt::cp_all_gather(const Tensor& rows_in, Tensor whole) {
  TRAINER_CHECK(hooks_.cp_all_gather, "context parallelism without a cp all-gather hook");
  auto p = phase("cp_all_gather");
  hooks_.cp_all_gather(rows_in, whole);
}

}  // namespace trainer::model

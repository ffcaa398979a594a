#include "runtime/parallel/pipeline_runner.h"

#include "runtime/core/check.h"

namespace trainer::parallel {

namespace {
constexpr int kActivationTag = 1;  // forward and backward go opposite ways: one tag serves both
constexpr int kTiedEmbeddingTag = 2;
}  // namespace

PipelineRunner::PipelineRunner(model::Gpt& model, dist::Comm& pp, PipeSchedule schedule, int micros,
                               int rows, int seq_len, model::Recompute recompute)
    : model_(model), pp_(pp), micros_(micros), piece_rows_(rows / micros), seq_len_(seq_len) {
  TRAINER_CHECK(
      micros >= 1 && rows % micros == 0,
      "parallel.pipeline.microbatches = " << micros << " must divide train.micro_batch = " << rows);
  const model::GptShard& s = model.layout().shard();
  TRAINER_CHECK(s.has_embedding == first_stage() && s.has_head == last_stage(),
                "pipeline stage " << stage() << " of " << stages() << " holds the wrong layers");
  steps_ = pipeline_steps(schedule, stage(), stages(), micros);
  model.allocate_activations(piece_rows_, seq_len, recompute,
                             micros_in_flight(schedule, stage(), stages(), micros));
  if (stages() > 2 && (first_stage() || last_stage()))  // (pp 2: an all-reduce in place)
    tied_grad_ = BackendBuffer(model.backend(),
                               tied_grad_buffer_floats(model.layout().find("wte.weight").numel));
}

void PipelineRunner::use(int micro) {
  model_.use_activation_slot(micro % model_.activation_slots());
}

void PipelineRunner::exchange(const char* phase, const Tensor* send, int send_peer, Tensor* recv,
                              int recv_peer) {
  const bool s = send != nullptr && send_peer >= 0 && send_peer < stages();
  const bool r = recv != nullptr && recv_peer >= 0 && recv_peer < stages();
  if (!s && !r) return;
  PhaseProfiler::Scope p(profiler_, phase, 0);
  TRAINER_CHECK((!s || send->dtype == DType::f32) && (!r || recv->dtype == DType::f32),
                "pipeline exchanges carry fp32");
  pp_.send_recv(s ? send->data : nullptr, s ? send->nbytes() : 0, send_peer,
                r ? recv->data : nullptr, r ? recv->nbytes() : 0, recv_peer, kActivationTag);
}

double PipelineRunner::run_step(const PipeStep& st, const int32_t* inputs, const int32_t* targets,
                                float dloss_scale,
                                const std::function<void()>& before_final_backward) {
  const int prev = stage() - 1, next = stage() + 1;  // out of range at the ends: no exchange
  const size_t piece = static_cast<size_t>(piece_rows_) * static_cast<size_t>(seq_len_);
  switch (st.action) {
    case PipeAction::recv_forward: {
      use(st.micro);
      Tensor in = model_.stage_input();
      exchange("pp.recv_forward", nullptr, -1, &in, prev);
      return 0;
    }
    case PipeAction::forward:
      use(st.micro);
      return model_.forward(inputs + piece * static_cast<size_t>(st.micro),
                            targets + piece * static_cast<size_t>(st.micro), dloss_scale);
    case PipeAction::send_forward: {
      use(st.micro);
      const Tensor out = model_.stage_output();
      exchange("pp.send_forward", &out, next, nullptr, -1);
      return 0;
    }
    case PipeAction::send_forward_recv_backward: {
      use(st.micro);
      const Tensor out = model_.stage_output();
      use(st.other);
      Tensor dout = model_.stage_output_grad();
      exchange("pp.send_forward_recv_backward", &out, next, &dout, next);
      return 0;
    }
    case PipeAction::backward:
      use(st.micro);
      if (st.micro == micros_ - 1 && before_final_backward) before_final_backward();
      model_.backward();
      return 0;
    case PipeAction::send_backward: {
      use(st.micro);
      const Tensor din = model_.stage_input_grad();
      exchange("pp.send_backward", &din, prev, nullptr, -1);
      return 0;
    }
    case PipeAction::send_backward_recv_forward: {
      use(st.micro);
      const Tensor din = model_.stage_input_grad();
      use(st.other);
      Tensor in = model_.stage_input();
      exchange("pp.send_backward_recv_forward", &din, prev, &in, prev);
      return 0;
    }
    case PipeAction::recv_backward: {
      use(st.micro);
      Tensor dout = model_.stage_output_grad();
      exchange("pp.recv_backward", nullptr, -1, &dout, next);
      return 0;
    }
  }
  return 0;
}

double PipelineRunner::train(const int32_t* inputs, const int32_t* targets, float dloss_scale,
                             const std::function<void()>& before_final_backward) {
  double loss_sum = 0;
  for (const PipeStep& st : steps_)
    loss_sum += run_step(st, inputs, targets, dloss_scale, before_final_backward);
  return loss_sum / micros_;
}

double PipelineRunner::evaluate(const int32_t* inputs, const int32_t* targets) {
  double loss_sum = 0;
  for (int m = 0; m < micros_; ++m)
    for (const PipeAction a :
         {PipeAction::recv_forward, PipeAction::forward, PipeAction::send_forward})
      loss_sum += run_step({a, m}, inputs, targets, 0.0f, nullptr);
  return loss_sum / micros_;
}

void PipelineRunner::sum_tied_embedding_grads() {
  if (stages() == 1 || !(first_stage() || last_stage())) return;
  Tensor grad = model_.grad(model_.layout().find("wte.weight"));
  if (stages() == 2) {  // the pipeline group is the two ends: each element is summed once
    pp_.all_reduce(grad.data, static_cast<size_t>(grad.numel()), dist::CommDType::f32,
                   dist::ReduceOp::sum);
    return;
  }
  // Chunk by chunk through the buffer: each chunk of this end's own gradient is sent before it
  // takes the other end's (send_recv returns once both are done; on cuda the next exchange waits
  // for the add that read the buffer).
  const int peer = first_stage() ? stages() - 1 : 0;
  const Tensor flat = grad.view({grad.numel()});
  const int64_t chunk = tied_grad_.tensor().numel();
  for (int64_t at = 0; at < flat.numel(); at += chunk) {
    Tensor mine = flat.slice(at, std::min(chunk, flat.numel() - at));
    Tensor other = tied_grad_.tensor().slice(0, mine.numel());
    pp_.send_recv(mine.data, mine.nbytes(), peer, other.data, other.nbytes(), peer,
                  kTiedEmbeddingTag);
    model_.backend().axpy(mine, other, 1.0f);  // a + b == b + a: both ends get the same sum
  }
}

int64_t PipelineRunner::tied_grad_buffer_floats(int64_t wte_numel) {
  return std::min(wte_numel, kTiedGradChunkFloats);
}

void PipelineRunner::copy_tied_embedding_to_last_stage() {
  if (stages() == 1 || !(first_stage() || last_stage())) return;
  const model::ParamSpec& wte = model_.layout().find("wte.weight");
  Tensor weights = model_.param(wte);
  if (first_stage())
    pp_.send_recv(weights.data, weights.nbytes(), stages() - 1, nullptr, 0, -1, kTiedEmbeddingTag);
  else
    pp_.send_recv(nullptr, 0, -1, weights.data, weights.nbytes(), 0, kTiedEmbeddingTag);
  if (last_stage()) model_.refresh_compute_weights(wte.offset, wte.numel);
}

}  // namespace trainer::parallel

#include "runtime/parallel/pipeline_runner.h"

#include "runtime/core/check.h"

namespace trainer::parallel {

namespace {
// Forward and backward go opposite ways, but around the interleaved schedule's ring (and at
// pp 2, where the next stage is the previous one) a pair of stages carries both: a tag each.
constexpr int kForwardTag = 1;
constexpr int kTiedEmbeddingTag = 2;
constexpr int kBackwardTag = 3;
}  // namespace

PipelineRunner::PipelineRunner(model::Gpt& model, dist::Comm& pp, PipeSchedule schedule, int micros,
                               int rows, int seq_len, model::Recompute recompute)
    : model_(model),
      pp_(pp),
      micros_(micros),
      piece_rows_(rows / micros),
      seq_len_(seq_len),
      chunks_(model.layout().shard().chunks) {
  TRAINER_CHECK(
      micros >= 1 && rows % micros == 0,
      "parallel.pipeline.microbatches = " << micros << " must divide train.micro_batch = " << rows);
  const model::GptShard& s = model.layout().shard();
  TRAINER_CHECK(s.has_embedding == first_stage() && s.has_head == last_stage(),
                "pipeline stage " << stage() << " of " << stages() << " holds the wrong layers");
  TRAINER_CHECK((schedule == PipeSchedule::interleaved) == (chunks_ > 1),
                "a model of " << chunks_ << " chunks under a schedule "
                              << (chunks_ > 1 ? "without" : "with") << " virtual stages");
  steps_ = pipeline_steps(schedule, stage(), stages(), micros, chunks_);
  PipeSlots slots =
      activation_slots(steps_, head_chunk_of(stage(), stages(), chunks_), micros, chunks_);
  model.allocate_activations(piece_rows_, seq_len, recompute, slots.plain, slots.head);
  slot_of_ = std::move(slots.slot_of);
  if (stages() > 2 && (first_stage() || last_stage()))  // (pp 2: an all-reduce in place)
    tied_grad_ = BackendBuffer(model.backend(),
                               tied_grad_buffer_floats(model.layout().find("wte.weight").numel));
  if (schedule == PipeSchedule::interleaved)
    grad_inbox_ = BackendBuffer(model.backend(), model.stage_output_grad().numel());
}

void PipelineRunner::use(const PipePiece& p) {
  model_.use_activation_slot(slot_of_[static_cast<size_t>(p.chunk * micros_ + p.micro)], p.chunk);
}

void PipelineRunner::exchange(const PipeStep& st) {
  const int next = (stage() + 1) % stages(), prev = (stage() + stages() - 1) % stages();
  std::vector<dist::P2pTransfer> transfers;
  std::string phase = "pp";
  auto add = [&](const char* what, bool send, const Tensor& t, int peer, int tag) {
    TRAINER_CHECK(t.dtype == DType::f32, "pipeline exchanges carry fp32");
    transfers.push_back({send, t.data, t.nbytes(), peer, tag});
    if (!profiler_) return;  // (the phase's name only for the profile)
    phase += phase.size() == 2 ? "." : "_";
    phase += what;
  };
  // (posted in this order on every stage: NCCL matches a pair's transfers in order)
  if (st.send_forward.some()) {
    use(st.send_forward);
    add("send_forward", true, model_.stage_output(), next, kForwardTag);
  }
  if (st.send_backward.some())
    add("send_backward", true, model_.stage_input_grad(), prev, kBackwardTag);
  if (st.recv_forward.some()) {
    use(st.recv_forward);
    add("recv_forward", false, model_.stage_input(), prev, kForwardTag);
  }
  if (st.recv_backward.some()) {
    const bool inbox = grad_inbox_.numel() > 0;
    if (inbox) {
      TRAINER_CHECK(!inbox_piece_.some(), "pipeline: an output gradient arrives for micro-batch "
                                              << st.recv_backward.micro << " before micro-batch "
                                              << inbox_piece_.micro << "'s was used");
      inbox_piece_ = st.recv_backward;
    }
    add("recv_backward", false, inbox ? grad_inbox_.tensor() : model_.stage_output_grad(), next,
        kBackwardTag);
  }
  PhaseProfiler::Scope p(profiler_, phase, 0);
  pp_.send_recv_batch(transfers);
}

void PipelineRunner::backward(const PipePiece& piece,
                              const std::function<void()>& before_final_backward) {
  use(piece);
  if (inbox_piece_.some()) {  // (the last stage's last chunk starts from its own loss instead)
    TRAINER_CHECK(inbox_piece_ == piece, "pipeline: micro-batch " << piece.micro << " of chunk "
                                                                  << piece.chunk
                                                                  << " runs backward before its "
                                                                     "output gradient arrived");
    model_.backend().copy(model_.stage_output_grad(), grad_inbox_.tensor());
    inbox_piece_ = PipePiece{};
  }
  // Each chunk's last micro-batch makes its gradients final; the first of those arms the hooks.
  const bool final = piece.micro == micros_ - 1;
  if (final && !armed_ && before_final_backward) before_final_backward();
  armed_ = armed_ || final;
  model_.backward(final);
}

double PipelineRunner::run_step(const PipeStep& st, const int32_t* inputs, const int32_t* targets,
                                float dloss_scale,
                                const std::function<void()>& before_final_backward) {
  const size_t piece = static_cast<size_t>(piece_rows_) * static_cast<size_t>(seq_len_);
  switch (st.action) {
    case PipeAction::forward:
      use(st.piece);
      return model_.forward(inputs + piece * static_cast<size_t>(st.piece.micro),
                            targets + piece * static_cast<size_t>(st.piece.micro), dloss_scale);
    case PipeAction::backward:
      backward(st.piece, before_final_backward);
      return 0;
    case PipeAction::exchange:
      exchange(st);
      return 0;
  }
  return 0;
}

double PipelineRunner::train(const int32_t* inputs, const int32_t* targets, float dloss_scale,
                             const std::function<void()>& before_final_backward) {
  armed_ = false;
  double loss_sum = 0;
  // fp8: the pieces quantize with the scales from before the schedule, and their amaxes move the
  // states once, after it (the pieces' forwards and backwards interleave, differently per stage)
  model_.begin_fp8_amaxes();
  for (const PipeStep& st : steps_)
    loss_sum += run_step(st, inputs, targets, dloss_scale, before_final_backward);
  model_.end_fp8_amaxes();
  return loss_sum / micros_;
}

double PipelineRunner::evaluate(const int32_t* inputs, const int32_t* targets) {
  // Each piece through the chunks in turn (around the ring), with no backward: any order of the
  // forwards works, and this one keeps a single slot of each chunk busy.
  double loss_sum = 0;
  const PipePiece none;
  for (int m = 0; m < micros_; ++m)
    for (int c = 0; c < chunks_; ++c) {
      const PipePiece piece{m, c};
      const bool first = first_stage() && c == 0, last = last_stage() && c == chunks_ - 1;
      if (!first)
        run_step(PipeStep{PipeAction::exchange, none, none, none, piece, none}, inputs, targets,
                 0.0f, nullptr);
      loss_sum += run_step(PipeStep::fwd(m, c), inputs, targets, 0.0f, nullptr);
      if (!last)
        run_step(PipeStep{PipeAction::exchange, none, piece, none, none, none}, inputs, targets,
                 0.0f, nullptr);
    }
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

#pragma once
// PipelineRunner: one stage's part of a pipeline-parallel forward and backward over a micro-batch
// cut into `micros` pieces (parallel.pipeline.microbatches), in the order of a PipeSchedule, with
// the stage boundaries' activations and gradients exchanged over the pipeline group (fp32, the
// residual stream; under sequence parallelism this tp rank's rows). The model's activation slots
// hold the pieces in flight, of whichever of the stage's model chunks (the interleaved schedule
// runs them in turn; only the head's chunk needs slots with the head's tensors). Also the tied
// embedding's gradient sum between the first and the last stage (Megatron's embedding group).
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/core/backend_buffer.h"
#include "runtime/core/phase_profiler.h"
#include "runtime/dist/comm.h"
#include "runtime/model/gpt.h"
#include "runtime/parallel/pipeline_schedule.h"

namespace trainer::parallel {

class PipelineRunner {
 public:
  // pp: the pipeline group, rank = stage. rows: the micro-batch's sequences (micros must divide).
  // The model's chunks (GptShard::chunks) are the schedule's virtual stages. Allocates the
  // model's activations: a slot per piece in flight, each under `recompute`.
  PipelineRunner(model::Gpt& model, dist::Comm& pp, PipeSchedule schedule, int micros, int rows,
                 int seq_len, model::Recompute recompute);

  // Forward and backward of every piece of one micro-batch (inputs/targets [rows * T], host).
  // Returns the micro-batch's mean loss on the last stage, 0 on the others.
  // before_final_backward: called before the last backward (the one whose gradients are final).
  // In fp8 compute the schedule is one Gpt::begin_fp8_amaxes() .. end_fp8_amaxes() bracket.
  double train(const int32_t* inputs, const int32_t* targets, float dloss_scale,
               const std::function<void()>& before_final_backward);
  // The forward only, piece by piece; the same return.
  double evaluate(const int32_t* inputs, const int32_t* targets);

  // The first and the last stage add up their wte gradients (the embedding's and the head's
  // parts), so both copies take the same update. A no-op on the stages between.
  void sum_tied_embedding_grads();
  // The last stage's copy of wte (master weights and, in bf16 compute, the matmuls' copy) from
  // the first stage's, so the copies stay equal bit for bit. A no-op on the stages between.
  void copy_tied_embedding_to_last_stage();
  // The bytes of the buffer the end stages receive the other end's wte gradient into, a chunk
  // at a time (pp > 2; at pp 2 the sum is an all-reduce over the pipeline group, in place).
  size_t tied_grad_bytes() const { return static_cast<size_t>(tied_grad_.nbytes()); }
  // The bytes of the buffer an output gradient waits in for its piece's backward (interleaved:
  // an exchange may receive one while it sends an input gradient from the model's scratch).
  size_t grad_inbox_bytes() const { return static_cast<size_t>(grad_inbox_.nbytes()); }
  // Its floats for a wte of `wte_numel`: at most kTiedGradChunkFloats (16 MiB), rather than a
  // second wte (2 GiB of fp32 for a 128k x 4096 vocabulary).
  static constexpr int64_t kTiedGradChunkFloats = int64_t{4} << 20;
  static int64_t tied_grad_buffer_floats(int64_t wte_numel);

  // Times each exchange as a phase ("pp.recv_forward", "pp.send_forward_recv_backward", ...;
  // the time a stage waits for its neighbours, the bubble included) while `profiler` is in a
  // step. Null: off.
  void set_profiler(PhaseProfiler* profiler) { profiler_ = profiler; }

  int stage() const { return pp_.rank(); }
  int stages() const { return pp_.size(); }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == stages() - 1; }
  const std::vector<PipeStep>& steps() const { return steps_; }
  int chunks() const { return chunks_; }

 private:
  void use(const PipePiece& p);  // the piece's activation slot
  double run_step(const PipeStep& s, const int32_t* inputs, const int32_t* targets,
                  float dloss_scale, const std::function<void()>& before_final_backward);
  void exchange(const PipeStep& s);
  void backward(const PipePiece& p, const std::function<void()>& before_final_backward);

  model::Gpt& model_;
  dist::Comm& pp_;
  int micros_, piece_rows_, seq_len_, chunks_;
  std::vector<PipeStep> steps_;
  std::vector<int> slot_of_;  // [chunk * micros + micro]: parallel::activation_slots
  BackendBuffer tied_grad_;   // the other end's wte gradient
  BackendBuffer grad_inbox_;  // see grad_inbox_bytes()
  PipePiece inbox_piece_;     // whose output gradient grad_inbox_ holds
  bool armed_ = false;        // a chunk's final backward has run in this train()
  PhaseProfiler* profiler_ = nullptr;
};

}  // namespace trainer::parallel

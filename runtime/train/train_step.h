#pragma once
// TrainStep: one optimizer step over the global batch: grad_accum micro-batches of forward and
// backward (the tp and cp collectives inside the model, through its hooks; under pipeline
// parallelism each micro-batch cut into pieces that flow through the stages, PipelineRunner;
// under context parallelism each sequence cut into this rank's chunks), gradient reduction over
// the replicas (dp, or dp x cp; buckets overlapped with the last backward), the global norm over
// the dp shards, tp slices and pipeline stages, clipping, AdamW. Also evaluation. Every layout
// that has the same micro_batch x grad_accum x dp sees the same tokens and computes the same
// update, whatever tp, pp and cp.
#include <functional>
#include <memory>

#include "runtime/ckpt/owned_shard.h"
#include "runtime/config/run_config.h"
#include "runtime/core/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/model/gpt.h"
#include "runtime/optim/adamw.h"
#include "runtime/parallel/grad_buckets.h"
#include "runtime/parallel/pipeline_runner.h"
#include "runtime/parallel/zero_optimizer.h"

namespace trainer::train {

// Fills inputs[B*T] and targets[B*T] with the next micro-batch of this rank.
using BatchSource = std::function<void(int32_t* inputs, int32_t* targets)>;

struct StepResult {
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;
  bool clipped = false;
  bool nonfinite = false;  // the update was skipped
  double comm_wait_s = 0;  // time blocked on gradient reduction after backward
  // Mixture of experts (0 for a dense model): the load-balancing loss, a mean over the global
  // batch like `loss` (which it is not part of), summed over the blocks; and the share of the
  // global batch's top_k choices dropped past an expert's capacity.
  double moe_aux_loss = 0;
  double moe_dropped_fraction = 0;
};

// The replicas of the gradients: the dp group, or under context parallelism the dp x cp group
// (each cp rank's gradient is that of its chunks' tokens: their sum is the sequences').
struct DataParallel {
  dist::Comm* comm = nullptr;  // null or size 1: single replica
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
};

// The tensor-parallel group: the ranks that hold slices of the same layers (Megatron's split of
// attention heads and MLP columns) and see the same data.
struct TensorParallel {
  dist::Comm* comm = nullptr;  // null or size 1: the whole model on this rank
  int size() const { return comm ? comm->size() : 1; }
};

// The pipeline group: the stages (rank = stage), each holding n_layer / pp consecutive blocks,
// of the same dp and tp coordinate.
struct PipelineParallel {
  dist::Comm* comm = nullptr;  // null or size 1: every layer on this rank
  int size() const { return comm ? comm->size() : 1; }
};

// The context-parallel group: the ranks that split each sequence (GptShard::cp_size; the
// attention's keys and values gathered over it).
struct ContextParallel {
  dist::Comm* comm = nullptr;  // null or size 1: whole sequences on this rank
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
};

// Expert parallelism (mixture of experts, parallel.ep > 1): the ep group exchanges tokens with
// its experts (all-to-all); the edp group holds the same experts, over which their gradients are
// summed (the dp x cp group sums the other tensors').
struct ExpertParallel {
  dist::Comm* comm = nullptr;      // ep; null or size 1: every expert on this rank
  dist::Comm* replicas = nullptr;  // edp
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
};

// The training state this rank owns: master weights and Adam moments of runs of flat elements of
// the model's parameter buffer (its optimizer shard: everything on dp rank 0 and nothing elsewhere
// without ZeRO; a 1/dp slice with ZeRO; under expert parallelism with ZeRO a slice of each dense
// run over dp and of each expert run over edp) of its tp slice of the model. Checkpoints save and
// load exactly this; after loading, TrainStep::sync_params_from_owners() makes every rank's
// working weights whole.
struct OwnedState {
  ckpt::OwnedRuns runs;  // empty: nothing
  int64_t adam_step = 0;
};

class TrainStep {
 public:
  TrainStep(const config::RunConfig& cfg, Backend& be, model::Gpt& model, DataParallel dp,
            TensorParallel tp = {}, PipelineParallel pp = {}, ContextParallel cp = {},
            ExpertParallel ep = {});

  StepResult run(int step, const BatchSource& next_batch);
  // Mean loss over `global_batches` global batches (grad_accum micro-batches of every dp rank
  // each), so that every layout with the same global batch evaluates the same tokens.
  double evaluate(int64_t global_batches, const BatchSource& next_batch);

  // The model's fresh weights (Gpt::init_weights, from `seed`): at ZeRO 3 only the shards this
  // rank owns are drawn (Gpt::init_weights_within), so that the whole model is never held.
  void init_weights(uint64_t seed);
  OwnedState owned_state();
  // Every rank's working weights from the owners' master weights (after a checkpoint load).
  void sync_params_from_owners();
  // fp8 compute with new scaling states (a fresh start): the whole weights' scales, from the
  // master weights each rank owns (Gpt::seed_fp8_weight_scales). Collective over dp and tp.
  void seed_fp8_weight_scales();

  // Times the step's phases (the model's ops, the gradient reduction, the optimizer) while
  // `profiler` is in a step; the caller begins and ends the steps it profiles. Null: off.
  void set_profiler(PhaseProfiler* profiler);

  int64_t adam_step() const { return zero_ ? zero_->adam_step() : opt_->step_count(); }
  void set_adam_step(int64_t t) {
    if (zero_)
      zero_->set_adam_step(t);
    else
      opt_->set_step_count(t);
  }
  Backend& backend() { return be_; }
  // Bytes of params (the bf16 copy included), grads and optimizer state allocated on this rank
  // (ZeRO shards included; a pipeline end stage's grads include the buffer it receives the other
  // end's wte gradient into).
  parallel::ZeroMemory state_bytes() const;
  // The model's activation slots, and the interleaved pipeline's inbox for an output gradient.
  size_t activation_bytes() const;

 private:
  const config::RunConfig& cfg_;
  Backend& be_;
  model::Gpt& model_;
  DataParallel dp_;
  TensorParallel tp_;
  PipelineParallel pp_;
  ContextParallel cp_;
  ExpertParallel ep_;
  // The group whose rank 0 owns (checkpoints, broadcasts) the state without ZeRO: dp x cp, or
  // under expert parallelism edp (ep group 0 holds every expert once).
  dist::Comm* owner_group() const;
  std::unique_ptr<parallel::PipelineRunner> pipeline_;  // pp > 1
  // Forward and backward of one micro-batch, through the pipeline when there is one; returns its
  // mean loss (0 on a pipeline stage without the head).
  double forward_backward(float dloss_scale, bool final_micro_batch);
  // The step's mixture-of-experts statistics (StepResult), reduced over the stages and replicas.
  void reduce_moe_stats(double tokens_global, StepResult& r);
  std::unique_ptr<optim::AdamW> opt_;
  std::unique_ptr<parallel::GradBuckets> buckets_;  // zero 0
  std::unique_ptr<parallel::ZeroOptimizer> zero_;   // zero 1-3 with dp > 1 (owns the AdamW)
  double reduce_and_norm();                         // grads -> global norm, per zero stage
  void clip_and_update(double grad_norm, double lr, StepResult& r);
  // The model's micro-batch: B sequences of this rank's tokens (under context parallelism its
  // two chunks of each, taken from the whole sequences the data gives, sequence_*).
  std::vector<int32_t> inputs_, targets_;
  std::vector<int32_t> sequence_inputs_, sequence_targets_;
  void next_micro_batch(const BatchSource& next_batch);
  PhaseProfiler* profiler_ = nullptr;
};

}  // namespace trainer::train

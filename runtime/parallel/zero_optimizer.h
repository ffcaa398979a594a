#pragma once
// ZeroOptimizer: ZeRO stages 1-3 over the model's flat fp32 buffers for one dp group.
//   stage 1: after the last backward the full gradient buffer is reduce-scattered (in place);
//            each rank runs AdamW on its shard; the updated params are all-gathered.
//   stage 2: as each unit's gradients are final (every micro-batch), the unit's range is
//            reduce-scattered into a shard-sized accumulator and its full-size range is zeroed.
//            The reduce-scatter runs on the comm thread while backward computes the next units
//            (at most kScattersInFlight at once; they land in issue order, so the sums are the
//            same as a blocking reduce-scatter's, bit for bit).
//   stage 3: stage 2, and parameters outside the shard are only valid while their unit is
//            gathered: before_unit gathers a unit (prefetching the next one on the comm thread),
//            the unit before it is released (poisoned with NaN, so a read of a released unit
//            shows up in the loss). wte (unit 0) stays gathered from the embedding to the tied
//            head's backward. After the update only the shard is valid. In bf16 compute a
//            gathered unit's bf16 copy is rounded from its fp32 params (FSDP's mixed precision,
//            gathering fp32), and released with it.
// Under expert parallelism the buffer is cut into segments (zero_segments): its dense runs
// sharded over dp, its expert runs over edp; every step above runs per segment (stages 2 and 3:
// per part of a unit in a segment), and a rank owns one range of each (owned()), with an AdamW
// and a part of the gradient accumulator each.
// The model allocates full-size params and grads buffers (at stage 2 the grads released from the
// start, at stage 3 the params and bf16 copy too: zero_state_memory);
// ZeRO here saves the optimizer state (1-3) and the gradient accumulator (2-3). At stage 3 the
// constructor acquires the shard this rank owns, and only that is drawn (TrainStep::init_weights)
// or loaded. Released ranges go through Backend::release: the cpu backend hands their pages back to
// the kernel, so that grads (2-3) and params (3) outside live units really leave memory, and the
// cuda backend unmaps their pages (Gpt's released buffers, ReleasableMemory). A released range is
// acquired (Backend::acquire) before it is written or read again: a unit's params and bf16 copy
// before its gather, its gradients before its backward (the tied head's wte gradient before the
// last unit's). The dist tests hold every ZeRO path to that: their runs fault on any touch of
// released memory (TRAINER_TEST_FAULT_RELEASED, the cpu backend's fault_released). Everything goes
// through the Backend and the Comm, so this runs on the cpu backend over Gloo and on the cuda
// backend over NCCL alike.
#include <deque>
#include <memory>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/model/gpt.h"
#include "runtime/optim/adamw.h"
#include "runtime/parallel/zero_comm.h"
#include "runtime/parallel/zero_layout.h"
#include "runtime/parallel/zero_shard.h"

namespace trainer::parallel {

// Bytes live on this rank. params/grads: the model's flat buffers, the params' bf16 copy included
// (all of it in the stages that keep them whole; the peak resident part, measured with mincore,
// where ZeRO frees pages) plus the shard gradient accumulator. scratch: communication staging (not
// in the ZeRO formula).
struct ZeroMemory {
  int64_t params = 0, grads = 0, optimizer = 0, scratch = 0;
};

class ZeroOptimizer {
 public:
  // comm: the dp group (non-null, any size). expert_comm: under expert parallelism the edp group,
  // over which the expert tensors are sharded; null otherwise. Installs the model hooks it needs
  // (stage 2, 3).
  ZeroOptimizer(int stage, Backend& be, model::Gpt& model, dist::Comm& comm,
                dist::Comm* expert_comm = nullptr);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  void begin_step();        // zeroes the gradient accumulator
  void reduce_gradients();  // after the last backward: the shard holds the global sum
  // Global L2 norm over all shards (summed over the dp group, which holds every dense and every
  // expert element's shard once), and over the tp group and the pipeline stages when there are
  // (tp_grad_norm.h).
  double grad_norm(dist::Comm* tp = nullptr, dist::Comm* pp = nullptr);
  // AdamW on the shard, its gradients read times grad_scale (clipping), then publish_params().
  void step(float lr, float beta1, float beta2, float eps, float weight_decay,
            float grad_scale = 1.0f);
  // Makes the working params consistent with the shards' master weights: all-gather (1, 2),
  // release every unit (3). Called by step() and after a checkpoint load.
  void publish_params();

  int stage() const { return stage_; }
  // The flat ranges this rank owns, one per segment (one without expert parallelism); the AdamW
  // of each, and its reduced gradients (after reduce_gradients()).
  size_t owned_count() const { return segments_.size(); }
  Range owned(size_t i) const;
  optim::AdamW& adam(size_t i) { return *opts_.at(i); }
  Tensor owned_grads(size_t i) const;
  int64_t adam_step() const { return opts_.front()->step_count(); }
  void set_adam_step(int64_t t);
  ZeroMemory memory() const;
  // Measures what this rank holds now into memory()'s peaks (they are taken as units are
  // gathered and reduced; TrainStep::init_weights takes the start's, the owned shard drawn).
  void sample_residency();

 private:
  void on_unit_grads_ready(int unit);
  void finish_oldest_scatter();
  void before_unit(int unit, bool backward);
  void ensure_gathered(int unit);
  void landed(int unit);  // a gather of `unit` finished
  void prefetch(int unit);
  void release(int unit);
  void release_params(Range r, float fill);
  int64_t scratch_bytes() const;

  dist::Comm& group(const ZeroSegment& s) const { return s.expert ? *expert_comm_ : comm_; }

  int stage_;
  Backend& be_;
  model::Gpt& model_;
  dist::Comm& comm_;
  dist::Comm* expert_comm_;
  ZeroUnits units_;  // the cut; the three below are its parts, named for the code that uses them
  const std::vector<ZeroSegment>& segments_;
  const ZeroShards& shards_;
  const std::vector<Range>& unit_range_;             // by unit id
  std::vector<std::unique_ptr<optim::AdamW>> opts_;  // by segment
  // stage >= 2: where each sharded segment's shard sits in grad_acc_ (-1: a segment on one rank,
  // whose gradients accumulate in place)
  std::vector<int64_t> acc_offset_;
  BackendBuffer grad_acc_;        // stage >= 2: the owned ranges' gradient accumulator
  BackendBuffer gather_staging_;  // stage <= 2: the largest chunk, for the whole-buffer all-gather
  // stage >= 2: reduce-scatters of finished units' parts in flight (oldest first, with their
  // segment), and spent ones kept for reuse (their staging stays allocated).
  std::deque<std::pair<size_t, std::unique_ptr<RangeReduceScatter>>> scatters_;
  std::vector<std::unique_ptr<RangeReduceScatter>> spare_scatters_;
  // stage 3: a unit's gathers (one per part of it in a segment), the synchronous one's and the
  // prefetch's
  using UnitGather = std::vector<std::unique_ptr<RangeGather>>;
  UnitGather sync_gather_, prefetch_;
  void start_gather(UnitGather& g, int unit);
  // Backend::acquire of `unit`'s range of a flat buffer (params, grads or the bf16 copy).
  void acquire(const Tensor& flat, int unit);
  static void finish_gather(UnitGather& g);
  int prefetch_unit_ = -1;
  std::vector<bool> live_;  // stage 3: unit gathered
  int64_t peak_params_ = 0, peak_grads_ = 0, peak_scratch_ = 0;
};

}  // namespace trainer::parallel

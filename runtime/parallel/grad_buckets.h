#pragma once
// GradBuckets: DDP-style gradient buckets over the model's flat gradient buffer. Buckets are
// contiguous runs of whole units (blocks) of about bucket_mb, filled in reverse layout order
// (the order backward produces them). With overlap on, a bucket's all-reduce starts on the
// communicator's thread as soon as its last unit's gradients are final, while backward goes on;
// finish() waits for all of them (before clipping). Without overlap, finish() reduces them all.
#include <memory>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/model/param_layout.h"

namespace trainer::parallel {

struct Bucket {
  int64_t offset = 0, numel = 0;  // range of the flat gradient buffer
  std::vector<int> units;         // units whose gradients it holds
  int pending = 0;                // units not ready yet in this step
  // Its runs of dense and of expert tensors (expert parallelism: each run is reduced over its own
  // group); one run of all of it otherwise.
  struct Run {
    int64_t offset = 0, numel = 0;
    bool expert = false;
  };
  std::vector<Run> runs;
  std::vector<std::shared_ptr<dist::Work>> work;
  bool launched = false;  // in this step
};

class GradBuckets {
 public:
  // expert_comm: under expert parallelism, the group that holds the same experts (edp), over
  // which the expert tensors' gradients (ParamSpec::expert) are summed instead of `comm`; null:
  // every gradient over `comm`.
  GradBuckets(const model::ParamLayout& layout, Tensor grads, dist::Comm* comm, double bucket_mb,
              bool overlap, dist::Comm* expert_comm = nullptr);

  // Arms the buckets for the micro-batch whose backward will produce final gradients.
  void begin_final_backward();
  // Model hook: unit's gradients are final.
  void unit_ready(int unit);
  // Waits for (or, without overlap, runs) every bucket's reduction. Gradients are summed.
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void launch(Bucket& b);
  bool reduces() const;  // whether any group has more than one rank
  Tensor grads_;
  dist::Comm* comm_;
  dist::Comm* expert_comm_;
  bool overlap_;
  bool armed_ = false;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_unit_;
};

}  // namespace trainer::parallel

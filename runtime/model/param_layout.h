#pragma once
// ParamLayout: every parameter tensor of this rank's model shard, as a view into ONE contiguous
// fp32 buffer (llm.c style). Tensors are ordered embedding unit, block 0 .. block L-1, final norm,
// so each block is one contiguous range: the unit of gradient buckets and of ZeRO-3 sharding.
// Each tensor records its global shape and which rows of the global tensor it holds, so that
// checkpoints and resharding only need this description.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/model/gpt_shape.h"

namespace trainer::model {

// A run of indices along a tensor's split dimension held by this rank.
struct SliceRange {
  int64_t global_start = 0;
  int64_t length = 0;
};

struct ParamSpec {
  std::string name;                      // Hugging Face GPT-2 name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> global_shape;     // full tensor, [out, in] for linear weights
  std::vector<int64_t> local_shape;      // what this rank holds
  int split_dim = 0;                     // dimension along which local_ranges cut the global tensor
  std::vector<SliceRange> local_ranges;  // where the local part sits, concatenated in order
  int64_t offset = 0;                    // element offset in the flat buffer
  int64_t numel = 0;                     // local elements
  int unit = 0;                          // 0: embeddings, 1+l: block l, L+1: final norm
  bool weight_decay = false;             // matrices and embeddings decay; norms and biases do not
  bool residual_proj = false;            // init std scaled by 1/sqrt(2L)
  bool is_bias_or_norm_bias = false;     // init zero
  bool is_norm_weight = false;           // init one
  bool tp_replicated = true;             // same values on every tp rank (norms, row-parallel bias)
  // Sequence parallelism: each tp rank's gradient covers its rows only (the layernorms', and a
  // mixture of experts' router and experts), and the tp ranks' gradients sum to the whole one.
  bool grad_sums_over_tp = false;
  // Pipeline parallelism: the last stage's copy of wte, which the head reads (tied to the first
  // stage's embedding). Its gradient is summed with the first stage's, so both copies stay equal;
  // the first stage's counts in the norm and goes into checkpoints.
  bool tied_copy = false;
  // Mixture of experts: a stacked [num_experts, ...] tensor of which this rank holds its expert
  // parallel rank's experts (local_ranges along dim 0). Its gradient replicas are the ranks that
  // hold the same experts (the expert-data-parallel group), not the dp group.
  bool expert = false;
};

struct UnitRange {
  int64_t offset = 0, numel = 0;
};

class ParamLayout {
 public:
  ParamLayout(const GptDims& dims, const GptShard& shard);

  const std::vector<ParamSpec>& params() const { return params_; }
  int64_t total_numel() const { return total_; }
  const ParamSpec& find(const std::string& name) const;  // throws if absent
  // Contiguous range of each unit present on this rank, in layout order.
  const std::vector<UnitRange>& units() const { return units_; }
  const GptDims& dims() const { return dims_; }
  const GptShard& shard() const { return shard_; }

 private:
  void add(ParamSpec spec, int unit);
  void add_experts(const std::string& block_prefix, int unit);  // a MoE block's MLP
  GptDims dims_;
  GptShard shard_;
  std::vector<ParamSpec> params_;
  std::vector<UnitRange> units_;
  int64_t total_ = 0;
};

}  // namespace trainer::model

namespace trainer::model {

// Visits the contiguous runs of a tensor's slice (the rank-local tensor that `ranges` cut from the
// global one along `split_dim`), in local order: f(global offset, local offset, count).
void for_each_slice_run(const std::vector<int64_t>& global_shape, int split_dim,
                        const std::vector<SliceRange>& ranges,
                        const std::function<void(int64_t, int64_t, int64_t)>& f);

// Copies this rank's part of a global tensor (host, fp32, global_shape) into `local` (numel
// elements), following spec.split_dim/local_ranges; scatter is the inverse.
void extract_local(const ParamSpec& spec, const float* global, float* local);
void insert_local(const ParamSpec& spec, const float* local, float* global);

}  // namespace trainer::model

#pragma once
// Causal self-attention through cuDNN's fused flash attention (TRAINER_ATTENTION=cudnn): the
// forward and backward operation graphs cuDNN's SDPA engines recognise, built with its backend
// API (cudnn_graph.h), planned once per shape and run on the backend's stream. Inputs and
// outputs are the kernels' own: qkv [B,T,3C] and out [B,T,C] in bf16, the row log-sum-exp of the
// scaled scores [B,NH,T] in fp32 (what the flash kernels keep, so either side can run the other's
// backward), dqkv [B,T,3C] in bf16.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "runtime/cuda/cudnn_graph.h"

namespace trainer::cuda {

struct AttentionShape {
  int64_t B = 0, T = 0, NH = 0, HS = 0;
};

// The operations of one SDPA graph, each finalized (that needs no device), and once planned
// its plan. The descriptors live as long as the plan that refers to them.
struct SdpaGraph {
  std::deque<cudnn_graph::Descriptor> tensors, ops;
  std::optional<cudnn_graph::Plan> plan;
  // The backward's own buffers in front of cuDNN's workspace: the fp32 dQ accumulator and
  // rowsum(dout * out), as cuDNN's frontend lays them out.
  int64_t own_workspace_bytes = 0;
  int64_t softmax_sum_offset = 0;  // (the accumulator first)
};
// The graphs cuDNN's frontend (1.x, for cuDNN 9.x below 9.21) builds for causal, bf16 SDPA with
// its statistics: scores, scale, the causal mask (two GEN_INDEX, CMP_GE, BINARY_SELECT with
// -inf), softmax in pointwise and reduction operations, and the products; the backward
// recomputes P from the statistics. index_math: the GEN_INDEX operations' compute type (the
// frontend has used INT32 and, later, FLOAT; planning tries both).
SdpaGraph sdpa_forward_graph(const AttentionShape& s, cudnnDataType_t index_math);
SdpaGraph sdpa_backward_graph(const AttentionShape& s, cudnnDataType_t index_math);

// Why this cuDNN version must not run the shape ("" when it may), by what cuDNN's frontend
// refuses or works around: 9.10.0 and 9.10.1 (known bugs); a backward below 9.6 (the frontend
// zeroes the dQ accumulator there; this backend does not); and below 9.16 a backward whose
// sequence is not a multiple of 128 (the frontend adds a padding mask there; these graphs have
// none). version: cudnnGetVersion()'s, 91900 for 9.19.0.
std::string sdpa_version_refusal(size_t version, const AttentionShape& s, bool backward);

// The score the causal mask puts over a later key: -inf, or below cuDNN 9.10 the lowest float, as
// cuDNN's frontend passes to those versions (a row masked whole within a tile would otherwise give
// -inf - -inf = NaN there).
float sdpa_mask_fill(size_t version);

class CudnnAttention {
 public:
  // Device memory of at least the given bytes, valid on the stream until the next request.
  using Workspace = std::function<void*(size_t bytes)>;

  // Loads libcudnn and creates a handle on `stream`; throws (naming the library and the fix)
  // when either fails. `workspace` serves the plans' workspaces.
  CudnnAttention(cudaStream_t stream, Workspace workspace);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Whether cuDNN runs this shape and direction (planned on the first ask). False: cuDNN has no
  // engine for it (the reason is logged once per shape), and the caller runs its own kernels.
  bool runs(const AttentionShape& s, bool backward);
  // A shape runs() said yes to (else std::logic_error).
  void forward(uint16_t* out, float* lse, const uint16_t* qkv, const AttentionShape& s);
  // dout in bf16 (the caller rounds it).
  void backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out,
                const float* lse, const AttentionShape& s);

  size_t version() const { return version_; }  // cudnnGetVersion(): 91900 for 9.19.0
  struct Stats {
    int64_t forward = 0, backward = 0;  // calls cuDNN ran
    int64_t refused = 0;                // calls handed back (no engine for the shape)
  };
  const Stats& stats() const { return stats_; }

 private:
  // The planned graph of a shape and direction, or null when cuDNN refused it.
  const SdpaGraph* graph(const AttentionShape& s, bool backward);
  const SdpaGraph& planned(const AttentionShape& s, bool backward);

  Workspace workspace_;
  cudnnHandle_t handle_ = nullptr;
  size_t version_ = 0;
  // null: refused
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, std::unique_ptr<SdpaGraph>>
      graphs_;
  Stats stats_;
};

}  // namespace trainer::cuda

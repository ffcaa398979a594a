#include "runtime/cuda/cudnn_attention.h"

#include <spdlog/spdlog.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/core/attention_state.h"
#include "runtime/cuda/cudnn_library.h"

namespace trainer::cuda {

using cudnn_graph::Descriptor;

namespace {

// The uids of the tensors bound in the variant pack (virtual tensors count up from kVirtual).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDout,
  kDq,
  kDk,
  kDv,
  kDqAccum,
  kSoftmaxSum,
  kScale,
  kOne,
  kNegInf,
  kVirtual = 100,
};

// Appends the tensors and operations of an SDPA graph to `g` (the deques keep every reference
// handed out valid). Dims are [B, NH, rows, cols]; qkv rows are 3C apart, out rows C.
class SdpaBuilder {
 public:
  SdpaBuilder(SdpaGraph& g, const AttentionShape& s, cudnnDataType_t index_math)
      : g_(g), s_(s), index_math_(index_math) {}

  int64_t B() const { return s_.B; }
  int64_t H() const { return s_.NH; }
  int64_t T() const { return s_.T; }
  int64_t D() const { return s_.HS; }
  int64_t C() const { return s_.NH * s_.HS; }

  // [B,NH,T,HS] in the packed qkv (q, k, v, dq, dk, dv), bf16.
  const Descriptor& qkv_part(int64_t uid) {
    return real(uid, {B(), H(), T(), D()}, {T() * 3 * C(), D(), 3 * C(), 1}, CUDNN_DATA_BFLOAT16);
  }
  // k or v of the packed qkv as [B,NH,HS,T]: transposed by its strides.
  const Descriptor& qkv_part_transposed(int64_t uid) {
    return real(uid, {B(), H(), D(), T()}, {T() * 3 * C(), D(), 1, 3 * C()}, CUDNN_DATA_BFLOAT16);
  }
  // [B,NH,T,HS] in out [B,T,C] (out, dout), bf16.
  const Descriptor& out_part(int64_t uid) {
    return real(uid, {B(), H(), T(), D()}, {T() * C(), D(), C(), 1}, CUDNN_DATA_BFLOAT16);
  }
  // A row statistic [B,NH,T,1], fp32 (the log-sum-exp, rowsum(dout * out)).
  const Descriptor& row_real(int64_t uid) { return real(uid, row_dims(), row_strides()); }
  const Descriptor& row_virtual() { return virt(row_dims(), row_strides()); }
  // The scores [B,NH,T,T], fp32 (or `type`), virtual.
  const Descriptor& scores(cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return virt(score_dims(), cudnn_graph::packed_strides(score_dims()), type);
  }
  // The scores transposed (P^T, dS^T for the products with a left operand of keys), virtual.
  const Descriptor& scores_transposed(cudnnDataType_t type) {
    return virt(score_dims(), {H() * T() * T(), T() * T(), 1, T()}, type);
  }
  // A host float bound by value.
  const Descriptor& scalar(int64_t uid) {
    return add_tensor({uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true});
  }
  const Descriptor& real(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides,
                         cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return add_tensor({uid, std::move(dims), std::move(strides), type, false, false});
  }
  const Descriptor& virt(std::vector<int64_t> dims, std::vector<int64_t> strides,
                         cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return add_tensor({next_virtual_++, std::move(dims), std::move(strides), type, true, false});
  }

  void pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b,
                 const Descriptor& y, const Descriptor* t = nullptr, int64_t axis = -1,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT) {
    g_.ops.push_back(cudnn_graph::pointwise(mode, x, b, y, t, axis, math));
  }
  // y = x (op) b, y a new virtual tensor of x's shape.
  const Descriptor& pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b) {
    const Descriptor& y = scores();
    pointwise(mode, x, b, y);
    return y;
  }
  void matmul(const Descriptor& a, const Descriptor& b, const Descriptor& c) {
    g_.ops.push_back(cudnn_graph::matmul(a, b, c));
  }
  void reduce(cudnnReduceTensorOp_t op, const Descriptor& x, const Descriptor& y) {
    g_.ops.push_back(cudnn_graph::reduction(op, x, y));
  }
  void reshape(const Descriptor& x, const Descriptor& y) {
    g_.ops.push_back(cudnn_graph::reshape(x, y));
  }

  // The causal mask: scores whose key index exceeds the query index become -inf.
  const Descriptor& causal_mask(const Descriptor& s, const Descriptor& neg_inf) {
    const Descriptor& row = scores(CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, 2, index_math_);
    const Descriptor& col = scores(CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, 3, index_math_);
    const Descriptor& keep = scores(CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, keep, nullptr, -1, CUDNN_DATA_BOOLEAN);
    const Descriptor& masked = scores();
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, &neg_inf, masked, &keep);  // keep ? s : -inf
    return masked;
  }

 private:
  std::vector<int64_t> score_dims() const { return {B(), H(), T(), T()}; }
  std::vector<int64_t> row_dims() const { return {B(), H(), T(), 1}; }
  std::vector<int64_t> row_strides() const { return {H() * T(), T(), 1, 1}; }
  const Descriptor& add_tensor(const cudnn_graph::TensorSpec& spec) {
    g_.tensors.push_back(cudnn_graph::tensor(spec));
    return g_.tensors.back();
  }

  SdpaGraph& g_;
  AttentionShape s_;
  cudnnDataType_t index_math_;
  int64_t next_virtual_ = kVirtual;
};

int64_t round_up(int64_t bytes, int64_t to) {
  return (bytes + to - 1) / to * to;
}

std::string shape_name(const AttentionShape& s, bool backward) {
  return std::string(backward ? "attention backward" : "attention forward") +
         " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " heads=" + std::to_string(s.NH) + " head size=" + std::to_string(s.HS);
}

}  // namespace

float sdpa_mask_fill(size_t version) {
  return version < 91000 ? std::numeric_limits<float>::lowest()
                         : -std::numeric_limits<float>::infinity();
}

std::string sdpa_version_refusal(size_t version, const AttentionShape& s, bool backward) {
  if (version >= 91000 && version < 91002)
    return "cuDNN " + std::to_string(version) + " has known SDPA bugs (9.10.0, 9.10.1)";
  if (backward && version < 90600)
    return "cuDNN " + std::to_string(version) +
           " (below 9.6) leaves zeroing the backward's dQ accumulator to the caller";
  if (backward && version < 91600 && s.T % 128 != 0)
    return "cuDNN " + std::to_string(version) +
           " (below 9.16) needs a padding mask for a backward at T % 128 != 0";
  return "";
}

SdpaGraph sdpa_forward_graph(const AttentionShape& s, cudnnDataType_t index_math) {
  SdpaGraph g;
  SdpaBuilder b(g, s, index_math);
  const Descriptor& q = b.qkv_part(kQ);
  const Descriptor& kt = b.qkv_part_transposed(kK);
  const Descriptor& v = b.qkv_part(kV);
  const Descriptor& o = b.out_part(kO);
  const Descriptor& stats = b.row_real(kStats);
  const Descriptor& scale = b.scalar(kScale);
  const Descriptor& neg_inf = b.scalar(kNegInf);

  const Descriptor& s0 = b.scores();
  b.matmul(q, kt, s0);
  const Descriptor& s1 = b.pointwise(CUDNN_POINTWISE_MUL, s0, &scale);
  const Descriptor& s2 = b.causal_mask(s1, neg_inf);
  // softmax, and its log-sum-exp: max + log(sum(exp(s - max)))
  const Descriptor& max = b.row_virtual();
  b.reduce(CUDNN_REDUCE_TENSOR_MAX, s2, max);
  const Descriptor& s3 = b.pointwise(CUDNN_POINTWISE_SUB, s2, &max);
  const Descriptor& e = b.pointwise(CUDNN_POINTWISE_EXP, s3, nullptr);
  const Descriptor& sum = b.row_virtual();
  b.reduce(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const Descriptor& log_sum = b.row_virtual();
  b.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, log_sum);
  b.pointwise(CUDNN_POINTWISE_ADD, max, &log_sum, stats);
  const Descriptor& p = b.scores(CUDNN_DATA_BFLOAT16);  // P in the products' input type
  b.pointwise(CUDNN_POINTWISE_DIV, e, &sum, p);
  b.matmul(p, v, o);
  return g;
}

SdpaGraph sdpa_backward_graph(const AttentionShape& s, cudnnDataType_t index_math) {
  SdpaGraph g;
  SdpaBuilder b(g, s, index_math);
  const Descriptor& q = b.qkv_part(kQ);
  const Descriptor& kt = b.qkv_part_transposed(kK);
  const Descriptor& vt = b.qkv_part_transposed(kV);
  const Descriptor& o = b.out_part(kO);
  const Descriptor& stats = b.row_real(kStats);
  const Descriptor& dout = b.out_part(kDout);
  const Descriptor& dq = b.qkv_part(kDq);
  const Descriptor& dk = b.qkv_part(kDk);
  const Descriptor& dv = b.qkv_part(kDv);
  const std::vector<int64_t> head_dims = {b.B(), b.H(), b.T(), b.D()};
  const Descriptor& dq_accum = b.real(kDqAccum, head_dims, cudnn_graph::packed_strides(head_dims));
  const Descriptor& softmax_sum = b.row_real(kSoftmaxSum);
  const Descriptor& scale = b.scalar(kScale);
  const Descriptor& one = b.scalar(kOne);
  const Descriptor& neg_inf = b.scalar(kNegInf);

  // softmax_sum = rowsum(dout * out)
  const Descriptor& dout_out =
      b.virt(head_dims, {b.H() * b.T() * b.D(), b.T() * b.D(), b.H() * b.D(), 1});
  b.pointwise(CUDNN_POINTWISE_MUL, dout, &o, dout_out);
  const Descriptor& rowsum = b.row_virtual();
  b.reduce(CUDNN_REDUCE_TENSOR_ADD, dout_out, rowsum);
  b.pointwise(CUDNN_POINTWISE_MUL, rowsum, &one, softmax_sum);
  // P = exp(scale q k^T - lse), masked
  const Descriptor& s0 = b.scores();
  b.matmul(q, kt, s0);
  const Descriptor& s1 = b.pointwise(CUDNN_POINTWISE_MUL, s0, &scale);
  const Descriptor& s2 = b.pointwise(CUDNN_POINTWISE_SUB, s1, &stats);
  const Descriptor& s3 = b.causal_mask(s2, neg_inf);
  const Descriptor& p = b.pointwise(CUDNN_POINTWISE_EXP, s3, nullptr);
  // dv = P^T dout
  const Descriptor& pt = b.scores_transposed(CUDNN_DATA_BFLOAT16);
  b.reshape(p, pt);
  b.matmul(pt, dout, dv);
  // dS = scale P (dout v^T - softmax_sum)
  const Descriptor& dp = b.scores();
  b.matmul(dout, vt, dp);
  const Descriptor& d1 = b.pointwise(CUDNN_POINTWISE_SUB, dp, &softmax_sum);
  const Descriptor& d2 = b.pointwise(CUDNN_POINTWISE_MUL, d1, &p);
  const Descriptor& ds = b.pointwise(CUDNN_POINTWISE_MUL, d2, &scale);
  // dk = dS^T q
  const Descriptor& dst = b.scores_transposed(CUDNN_DATA_BFLOAT16);
  b.reshape(ds, dst);
  b.matmul(dst, q, dk);
  // dq = dS k, accumulated in fp32, then rounded. K's reshape is declared fp32 as the frontend
  // leaves it (its virtual tensors default to the graph's intermediate type), unlike P^T and dS^T,
  // which it declares in the inputs' type.
  const Descriptor& k = b.virt(head_dims, {b.T() * 3 * b.C(), b.D(), 3 * b.C(), 1});
  b.reshape(kt, k);
  b.matmul(ds, k, dq_accum);
  b.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, dq);

  g.softmax_sum_offset = b.B() * b.H() * b.T() * b.D() * 4;  // after the dq accumulator
  g.own_workspace_bytes = round_up(g.softmax_sum_offset + b.B() * b.H() * b.T() * 4, 256);
  return g;
}

CudnnAttention::CudnnAttention(cudaStream_t stream, Workspace workspace)
    : workspace_(std::move(workspace)) {
  const CudnnLibrary& l = cudnn();  // throws naming the library and the fix
  version_ = l.get_version();
  cudnn_graph::check(l.create(&handle_), "cudnnCreate");
  cudnn_graph::check(l.set_stream(handle_, stream), "cudnnSetStream");
  spdlog::info("attention: cuDNN {} ({}) fused attention (TRAINER_ATTENTION=cudnn)", version_,
               cudnn_file_name());
}

CudnnAttention::~CudnnAttention() {
  graphs_.clear();  // plans before the handle they were made with
  if (handle_) cudnn().destroy(handle_);
}

const SdpaGraph* CudnnAttention::graph(const AttentionShape& s, bool backward) {
  const auto key = std::tuple(s.B, s.T, s.NH, s.HS, backward);
  if (const auto it = graphs_.find(key); it != graphs_.end()) return it->second.get();
  const std::string what = shape_name(s, backward);
  std::string refusals = sdpa_version_refusal(version_, s, backward);
  std::unique_ptr<SdpaGraph> planned;
  if (refusals.empty()) {
    for (const cudnnDataType_t index_math : {CUDNN_DATA_FLOAT, CUDNN_DATA_INT32}) {
      try {
        auto g = std::make_unique<SdpaGraph>(backward ? sdpa_backward_graph(s, index_math)
                                                      : sdpa_forward_graph(s, index_math));
        std::vector<const Descriptor*> ops;
        for (const Descriptor& op : g->ops) ops.push_back(&op);
        g->plan.emplace(cudnn_graph::make_plan(handle_, ops, what));
        planned = std::move(g);
        break;
      } catch (const cudnn_graph::CudnnError& e) {
        refusals +=
            (refusals.empty() ? "" : "; then with INT32 index math: ") + std::string(e.what());
      }
    }
  }
  if (planned)
    spdlog::info("attention: cuDNN plans {} (workspace {} bytes)", what,
                 planned->plan->workspace_bytes + planned->own_workspace_bytes);
  else
    spdlog::warn("attention: cuDNN has no engine for {}; tensor_core's kernels run it: {}", what,
                 refusals);
  return (graphs_[key] = std::move(planned)).get();
}

bool CudnnAttention::runs(const AttentionShape& s, bool backward) {
  if (graph(s, backward)) return true;
  ++stats_.refused;
  return false;
}

const SdpaGraph& CudnnAttention::planned(const AttentionShape& s, bool backward) {
  const SdpaGraph* g = graph(s, backward);
  if (!g)
    throw std::logic_error("CudnnAttention: " + shape_name(s, backward) +
                           " has no plan (ask runs() first)");
  return *g;
}

void CudnnAttention::forward(uint16_t* out, float* lse, const uint16_t* qkv,
                             const AttentionShape& s) {
  const SdpaGraph& g = planned(s, false);
  const int64_t C = s.NH * s.HS;
  float scale = attention_scale(s.HS), neg_inf = sdpa_mask_fill(version_);
  void* ws = g.plan->workspace_bytes ? workspace_(g.plan->workspace_bytes) : nullptr;
  cudnn_graph::execute(handle_, *g.plan, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
                       {const_cast<uint16_t*>(qkv), const_cast<uint16_t*>(qkv + C),
                        const_cast<uint16_t*>(qkv + 2 * C), out, lse, &scale, &neg_inf},
                       ws);
  ++stats_.forward;
}

void CudnnAttention::backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                              const uint16_t* out, const float* lse, const AttentionShape& s) {
  const SdpaGraph& g = planned(s, true);
  const int64_t C = s.NH * s.HS;
  float scale = attention_scale(s.HS), one = 1.0f;
  float neg_inf = sdpa_mask_fill(version_);
  auto* ws = static_cast<char*>(workspace_(g.own_workspace_bytes + g.plan->workspace_bytes));
  cudnn_graph::execute(
      handle_, *g.plan,
      {kQ, kK, kV, kO, kStats, kDout, kDq, kDk, kDv, kDqAccum, kSoftmaxSum, kScale, kOne, kNegInf},
      {const_cast<uint16_t*>(qkv), const_cast<uint16_t*>(qkv + C),
       const_cast<uint16_t*>(qkv + 2 * C), const_cast<uint16_t*>(out), const_cast<float*>(lse),
       const_cast<uint16_t*>(dout), dqkv, dqkv + C, dqkv + 2 * C, ws, ws + g.softmax_sum_offset,
       &scale, &one, &neg_inf},
      g.plan->workspace_bytes ? ws + g.own_workspace_bytes : nullptr);
  ++stats_.backward;
}

}  // namespace trainer::cuda

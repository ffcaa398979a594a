#pragma once
// A pretend device on the cpu, for checking that the code above the Backend never touches backend
// memory from the host, as the cuda backend requires. OpaqueBackend hands out CpuBackend memory
// under tagged addresses (bit 62 set: non-canonical on x86-64 and arm64, so a host read or write
// through one faults) and reports DeviceType::cuda; each op strips the tags and runs the
// CpuBackend's. OpaqueComm does the same for a communicator, as NCCL reads device memory itself.
// Host pointers (a scalar, a staging vector) pass through both untouched. The arithmetic is the
// CpuBackend's, so a run on these must give the plain cpu run's numbers bit for bit.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/core/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/dist/comm.h"

namespace trainer::testing {

inline constexpr uintptr_t kOpaqueTag = uintptr_t{1} << 62;

inline void* tag(void* p) {
  return p ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kOpaqueTag) : nullptr;
}
template <class T>
T* untag(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) & ~kOpaqueTag);
}
inline bool tagged(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & kOpaqueTag) != 0;
}

class OpaqueBackend : public Backend {
 public:
  std::string name() const override { return "opaque"; }
  DeviceType device() const override { return DeviceType::cuda; }

  void* alloc(size_t bytes) override { return tag(cpu_.alloc(bytes)); }
  void free(void* p) override { cpu_.free(untag(p)); }
  void zero(Tensor t) override { cpu_.zero(in(t)); }
  void copy(Tensor dst, const Tensor& src) override { cpu_.copy(in(dst), in(src)); }
  void to_host(void* dst, const Tensor& src) override { cpu_.to_host(dst, in(src)); }
  void from_host(Tensor dst, const void* src) override { cpu_.from_host(in(dst), src); }
  void release(Tensor t, float fill) override { cpu_.release(in(t), fill); }
  int64_t resident_bytes(const Tensor& t) override { return cpu_.resident_bytes(in(t)); }

  void gemm(const Gemm& g) override {
    Gemm h = g;
    h.a = untag(g.a), h.b = untag(g.b), h.c = untag(g.c);
    cpu_.gemm(h);
  }
  void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      const Tensor& residual = Tensor()) override {
    cpu_.matmul_forward(in(out), in(inp), in(weight), in(bias), in(residual));
  }
  void matmul_forward_fp8(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                          const Tensor& state, Tensor amax) override {
    cpu_.matmul_forward_fp8(in(out), in(inp), in(weight), in(bias), in(state), in(amax));
  }
  void fp8_push_amaxes(Tensor states, const Tensor& amaxes) override {
    cpu_.fp8_push_amaxes(in(states), in(amaxes));
  }
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) override {
    cpu_.matmul_backward(in(dinp), in(dweight), in(dbias), in(dout), in(inp), in(weight));
  }
  void matmul_gelu_forward(Tensor out, Tensor pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) override {
    cpu_.matmul_gelu_forward(in(out), in(pre), in(inp), in(weight), in(bias));
  }
  void matmul_gelu_backward(Tensor dpre, Tensor dweight, Tensor dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight, const Tensor& pre) override {
    cpu_.matmul_gelu_backward(in(dpre), in(dweight), in(dbias), in(dout), in(inp), in(weight),
                              in(pre));
  }
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias) override {
    cpu_.layernorm_forward(in(out), in(mean), in(rstd), in(inp), in(weight), in(bias));
  }
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor dinp_bf16) override {
    cpu_.layernorm_backward(in(dinp), in(dweight), in(dbias), in(dout), in(inp), in(weight),
                            in(mean), in(rstd), in(dinp_bf16));
  }
  void gelu_forward(Tensor out, const Tensor& inp) override { cpu_.gelu_forward(in(out), in(inp)); }
  void gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) override {
    cpu_.gelu_backward(in(dinp), in(inp), in(dout));
  }
  Shape attention_state_shape(int64_t B, int64_t NH, int64_t T, int64_t HS) const override {
    return cpu_.attention_state_shape(B, NH, T, HS);
  }
  void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) override {
    cpu_.attention_forward(in(out), in(att), in(qkv), n_head);
  }
  void attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& att, int n_head) override {
    cpu_.attention_backward(in(dqkv), in(dout), in(qkv), in(out), in(att), n_head);
  }
  bool supports_context_parallel() const override { return cpu_.supports_context_parallel(); }
  Shape attention_cp_state_shape(int64_t B, int64_t NH, int64_t Tl, int64_t T,
                                 int64_t HS) const override {
    return cpu_.attention_cp_state_shape(B, NH, Tl, T, HS);
  }
  void attention_forward_cp(Tensor out, Tensor att, const Tensor& qkv_all, ContextSplit split,
                            int n_head) override {
    cpu_.attention_forward_cp(in(out), in(att), in(qkv_all), split, n_head);
  }
  void attention_backward_cp(Tensor dqkv_all, const Tensor& dout, const Tensor& qkv_all,
                             const Tensor& out, const Tensor& att, ContextSplit split,
                             int n_head) override {
    cpu_.attention_backward_cp(in(dqkv_all), in(dout), in(qkv_all), in(out), in(att), split,
                               n_head);
  }
  void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t pos_offset) override {
    cpu_.embedding_forward(in(out), in(tokens), in(wte), in(wpe), pos_offset);
  }
  void embedding_backward(Tensor dwte, Tensor dwpe, const Tensor& dout, const Tensor& tokens,
                          int64_t pos_offset) override {
    cpu_.embedding_backward(in(dwte), in(dwpe), in(dout), in(tokens), pos_offset);
  }
  void softmax_cross_entropy(Tensor logits, Tensor losses, const Tensor& targets, float dloss_scale,
                             int64_t vocab) override {
    cpu_.softmax_cross_entropy(in(logits), in(losses), in(targets), dloss_scale, vocab);
  }
  void cross_entropy_shard_stats(Tensor stats, const Tensor& logits, const Tensor& targets,
                                 int64_t vocab_start, int64_t vocab) override {
    cpu_.cross_entropy_shard_stats(in(stats), in(logits), in(targets), vocab_start, vocab);
  }
  void cross_entropy_shard_finish(Tensor logits, Tensor losses, const Tensor& all_stats,
                                  const Tensor& targets, float dloss_scale, int64_t vocab_start,
                                  int64_t vocab) override {
    cpu_.cross_entropy_shard_finish(in(logits), in(losses), in(all_stats), in(targets), dloss_scale,
                                    vocab_start, vocab);
  }
  void moe_gather_rows(Tensor out, const Tensor& inp, const Tensor& token_of_slot,
                       const Tensor& scale) override {
    cpu_.moe_gather_rows(in(out), in(inp), in(token_of_slot), in(scale));
  }
  void moe_combine_rows(Tensor out, const Tensor& inp, const Tensor& slot,
                        const Tensor& weight) override {
    cpu_.moe_combine_rows(in(out), in(inp), in(slot), in(weight));
  }
  void moe_gate_grad(Tensor dweight, const Tensor& dout, const Tensor& inp,
                     const Tensor& slot) override {
    cpu_.moe_gate_grad(in(dweight), in(dout), in(inp), in(slot));
  }
  void adamw_step(Tensor params, const Tensor& grads, Tensor m, Tensor v, const AdamWParams& p,
                  Tensor params_bf16) override {
    cpu_.adamw_step(in(params), in(grads), in(m), in(v), p, in(params_bf16));
  }
  void scale(Tensor x, float alpha) override { cpu_.scale(in(x), alpha); }
  void axpy(Tensor y, const Tensor& x, float alpha) override { cpu_.axpy(in(y), in(x), alpha); }
  double sum_squares(const Tensor& x) override { return cpu_.sum_squares(in(x)); }
  double sum(const Tensor& x) override { return cpu_.sum(in(x)); }
  void round_to_bf16(Tensor dst, const Tensor& src) override {
    cpu_.round_to_bf16(in(dst), in(src));
  }

 private:
  // A tensor of this backend (tagged, DeviceType::cuda) as the CpuBackend's; an empty one stays
  // empty. A host tensor handed to an op is a bug of the caller: it fails here.
  static Tensor in(const Tensor& t) {
    if (t.empty()) return t;
    if (!tagged(t.data) || t.device != DeviceType::cuda)
      throw std::runtime_error("OpaqueBackend: an op got a host tensor (" + t.shape.str() + ")");
    Tensor h = t;
    h.data = untag(t.data);
    h.device = DeviceType::cpu;
    return h;
  }
  mutable cpu::CpuBackend cpu_;
};

// device_memory false: a group the cuda backend gives Gloo (train::nccl_group_on_cuda), which
// must never be handed backend memory: a tagged pointer throws, naming the group.
class OpaqueComm : public dist::Comm {
 public:
  explicit OpaqueComm(std::unique_ptr<dist::Comm> inner, bool device_memory = true)
      : inner_(std::move(inner)), device_memory_(device_memory) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  int global_rank(int r) const override { return inner_->global_rank(r); }
  void all_reduce(void* d, size_t n, dist::CommDType t, dist::ReduceOp op) override {
    inner_->all_reduce(pass(d), n, t, op);
  }
  std::shared_ptr<dist::Work> all_reduce_async(void* d, size_t n, dist::CommDType t,
                                               dist::ReduceOp op) override {
    return inner_->all_reduce_async(pass(d), n, t, op);
  }
  void reduce_scatter(const void* i, void* o, size_t n, dist::CommDType t,
                      dist::ReduceOp op) override {
    inner_->reduce_scatter(pass(i), pass(o), n, t, op);
  }
  std::shared_ptr<dist::Work> reduce_scatter_async(const void* i, void* o, size_t n,
                                                   dist::CommDType t, dist::ReduceOp op) override {
    return inner_->reduce_scatter_async(pass(i), pass(o), n, t, op);
  }
  void all_gather(const void* i, void* o, size_t n, dist::CommDType t) override {
    inner_->all_gather(pass(i), pass(o), n, t);
  }
  std::shared_ptr<dist::Work> all_gather_async(const void* i, void* o, size_t n,
                                               dist::CommDType t) override {
    return inner_->all_gather_async(pass(i), pass(o), n, t);
  }
  void broadcast(void* d, size_t n, dist::CommDType t, int root) override {
    inner_->broadcast(pass(d), n, t, root);
  }
  std::shared_ptr<dist::Work> broadcast_async(void* d, size_t n, dist::CommDType t,
                                              int root) override {
    return inner_->broadcast_async(pass(d), n, t, root);
  }
  std::shared_ptr<dist::Work> reduce_async(void* d, size_t n, dist::CommDType t, dist::ReduceOp op,
                                           int root) override {
    return inner_->reduce_async(pass(d), n, t, op, root);
  }
  void all_to_all(const void* i, void* o, size_t n, dist::CommDType t) override {
    inner_->all_to_all(pass(i), pass(o), n, t);
  }
  void send(const void* d, size_t bytes, int peer, int tag_) override {
    inner_->send(pass(d), bytes, peer, tag_);
  }
  void recv(void* d, size_t bytes, int peer, int tag_) override {
    inner_->recv(pass(d), bytes, peer, tag_);
  }
  void send_recv_batch(const std::vector<dist::P2pTransfer>& transfers) override {
    std::vector<dist::P2pTransfer> host = transfers;
    for (dist::P2pTransfer& t : host)
      if (t.bytes > 0) t.data = pass(t.data);
    inner_->send_recv_batch(host);
  }
  void barrier() override { inner_->barrier(); }

 private:
  template <class T>
  T* pass(T* p) const {
    if (!device_memory_ && tagged(p))
      throw std::logic_error("backend memory handed to the " + name() + " group of " +
                             std::to_string(size()) +
                             " rank(s), which the cuda backend runs on Gloo (host memory only)");
    return untag(p);
  }
  std::unique_ptr<dist::Comm> inner_;
  bool device_memory_;
};

}  // namespace trainer::testing

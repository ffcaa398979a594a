#pragma once
// CpuBackend: the reference Backend. fp32 on host memory, the math of runtime/cpu/ops.h, GEMM
// through OpenBLAS, the other loops threaded with OpenMP; bf16 operands and outputs emulated
// through fp32 buffers (Bf16Staging). Results do not depend on the number
// of threads (no reductions whose order changes between runs).
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/core/op_shapes.h"
#include "runtime/core/released_spans.h"
#include "runtime/cpu/bf16_staging.h"

namespace trainer::cpu {

class CpuBackend : public Backend {
 public:
  // fault_released: released whole pages also lose their access (PROT_NONE) until acquired, so
  // that a read or write of released memory crashes here as it would on the cuda backend, whose
  // released granules are unmapped (tests; TRAINER_TEST_FAULT_RELEASED=1 for a run).
  explicit CpuBackend(bool fault_released = false);
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  DeviceType device() const override { return DeviceType::cpu; }

  void* alloc(size_t bytes) override;  // 64-byte aligned, never null (throws OutOfMemory)
  void free(void* p) override;
  void zero(Tensor t) override;
  void copy(Tensor dst, const Tensor& src) override;
  void to_host(void* dst, const Tensor& src) override;
  void from_host(Tensor dst, const void* src) override;
  // Whole pages inside a released range go back to the kernel (host_pages.h).
  void release(Tensor t, float fill) override;
  void acquire(Tensor t) override;
  int64_t resident_bytes(const Tensor& t) override;

  void gemm(const Gemm& g) override;
  void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      const Tensor& residual = Tensor()) override;
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) override;
  // The fused GELU ops as their parts: the GEMM, then the GELU (or its derivative) on the fp32
  // sums, each output rounded once.
  void matmul_gelu_forward(Tensor out, Tensor pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) override;
  void matmul_gelu_backward(Tensor dpre, Tensor dweight, Tensor dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight, const Tensor& pre) override;
  // Emulated (the reference of the cuda kernels' tests); supports_fp8() stays false, so runs
  // refuse precision.compute: fp8 on the cpu backend.
  void matmul_forward_fp8(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                          const Tensor& fp8_state, Tensor fp8_amax) override;
  void fp8_push_amaxes(Tensor fp8_states, const Tensor& amaxes) override;

  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor dinp_bf16 = Tensor()) override;
  void gelu_forward(Tensor out, const Tensor& inp) override;
  void gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) override;
  void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) override;
  // The probabilities are kept (the default attention_state_shape); `out` is not read.
  void attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& att, int n_head) override;
  bool supports_context_parallel() const override { return true; }
  void attention_forward_cp(Tensor out, Tensor att, const Tensor& qkv_all, ContextSplit split,
                            int n_head) override;
  void attention_backward_cp(Tensor dqkv_all, const Tensor& dout, const Tensor& qkv_all,
                             const Tensor& out, const Tensor& att, ContextSplit split,
                             int n_head) override;
  void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t pos_offset) override;
  void embedding_backward(Tensor dwte, Tensor dwpe, const Tensor& dout, const Tensor& tokens,
                          int64_t pos_offset) override;
  void softmax_cross_entropy(Tensor logits, Tensor losses, const Tensor& targets, float dloss_scale,
                             int64_t vocab) override;
  void cross_entropy_shard_stats(Tensor stats, const Tensor& logits, const Tensor& targets,
                                 int64_t vocab_start, int64_t vocab) override;
  void cross_entropy_shard_finish(Tensor logits, Tensor losses, const Tensor& all_stats,
                                  const Tensor& targets, float dloss_scale, int64_t vocab_start,
                                  int64_t vocab) override;
  void moe_gather_rows(Tensor out, const Tensor& inp, const Tensor& token_of_slot,
                       const Tensor& scale) override;
  void moe_combine_rows(Tensor out, const Tensor& inp, const Tensor& slot,
                        const Tensor& weight) override;
  void moe_gate_grad(Tensor dweight, const Tensor& dout, const Tensor& inp,
                     const Tensor& slot) override;

  void adamw_step(Tensor params, const Tensor& grads, Tensor m, Tensor v, const AdamWParams& p,
                  Tensor params_bf16 = Tensor()) override;
  void scale(Tensor x, float alpha) override;
  void axpy(Tensor y, const Tensor& x, float alpha) override;
  double sum_squares(const Tensor& x) override;
  double sum(const Tensor& x) override;
  void round_to_bf16(Tensor dst, const Tensor& src) override;

 private:
  // matmul_backward into an fp32 dinp (may be null; overwritten): the two ops' shared part.
  void linear_backward(const char* op, float* dinp, Tensor dweight, Tensor dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& weight,
                       const LinearDims& d);

  std::unique_ptr<ReleasedSpans> faulting_;  // fault_released: the pages handed back
  Bf16Staging staging_;                      // bf16 operands and outputs, computed in fp32
  std::vector<float> fp8_inp_, fp8_weight_;  // the e4m3 values of the quantized operands
};

}  // namespace trainer::cpu

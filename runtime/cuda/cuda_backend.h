#pragma once
// CudaBackend: the Backend on one GPU. Device memory from a DeviceArena, all work on one compute
// stream (ops return without syncing; to_host, sum and sum_squares sync), GEMMs through cuBLASLt
// (strict fp32, or bf16 operands with fp32 accumulation), the other ops in kernels/. Same numbers
// as the cpu backend within fp32 rounding (bf16: within bf16 rounding).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "runtime/core/attention_state.h"
#include "runtime/core/backend.h"
#include "runtime/core/op_shapes.h"
#include "runtime/cuda/cublaslt_gemm.h"
#include "runtime/cuda/device_arena.h"
#include "runtime/cuda/releasable_memory.h"

namespace trainer::cuda {

class CudnnAttention;  // cudnn_attention.h (builds with cuDNN's headers only)

// Number of visible devices, or 0 with the reason (driver missing, no device) in *why.
int device_count(std::string* why = nullptr);

// The device a rank uses among `visible` ones: LOCAL_RANK's, or device 0 when the rank sees just
// one (Slurm's --gpus-per-task=1 and --gpu-bind give each task its own GPU as device 0). Throws
// naming LOCAL_RANK when it has no device of its own.
int device_for_local_rank(int local_rank, int visible);

class CudaBackend : public Backend {
 public:
  // Uses device local_rank (throws when it does not exist); cudaSetDevice for this thread.
  explicit CudaBackend(int local_rank);
  ~CudaBackend() override;

  std::string name() const override { return device_name_; }  // e.g. "NVIDIA H200"
  DeviceType device() const override { return DeviceType::cuda; }
  // What the arena took from cudaMalloc (it keeps its chunks until the backend goes: every
  // buffer, scratch and cuBLASLt's workspace), plus the most pages the releasable buffers held;
  // not NCCL's or the CUDA context's own memory.
  std::optional<int64_t> peak_device_bytes() const override;
  // attention (TRAINER_ATTENTION; with cudnn, cuDNN's version and the calls it ran and refused),
  // gemm (TRAINER_GEMM_AUTOTUNE), gelu (TRAINER_GELU_EPILOGUE).
  std::map<std::string, std::string> kernels() const override;
  cudaStream_t stream() const { return stream_; }

  void* alloc(size_t bytes) override;
  // Pages that release() unmaps and acquire() maps again (ReleasableMemory), where the driver
  // has virtual memory management and TRAINER_CUDA_UNMAP is not 0; else alloc()'s, which
  // release() only fills.
  void* alloc_releasable(size_t bytes) override;
  void* alloc_released(size_t bytes) override;  // (ReleasableMemory: no page mapped)
  void free(void* p) override;
  void zero(Tensor t) override;
  void copy(Tensor dst, const Tensor& src) override;
  void to_host(void* dst, const Tensor& src) override;
  void from_host(Tensor dst, const void* src) override;
  void synchronize() override;
  std::unique_ptr<DeviceTimer> make_timer() override;  // events on the compute stream
  void release(Tensor t, float fill) override;         // see alloc_releasable
  void acquire(Tensor t) override;
  int64_t resident_bytes(const Tensor& t) override;

  void gemm(const Gemm& g) override;
  void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      const Tensor& residual = Tensor()) override;
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) override;
  // The GELU rides in cuBLASLt's epilogues (GELU_AUX_BIAS forward, DGELU backward) where it has
  // one for the shape, unless TRAINER_GELU_EPILOGUE=0; otherwise the GEMM writes fp32 sums and
  // kernels/ applies the GELU. Same numbers either way, within fp32 (bf16) rounding.
  void matmul_gelu_forward(Tensor out, Tensor pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) override;
  void matmul_gelu_backward(Tensor dpre, Tensor dweight, Tensor dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight, const Tensor& pre) override;
  void set_gelu_epilogue(bool on) { gelu_epilogue_ = on; }  // tests and benchmarks
  // dbias from the dweight GEMM's epilogue (cuBLASLt's BGRADB; on by default), or the bias kernel
  void set_bias_grad_epilogue(bool on) { bias_grad_epilogue_ = on; }  // tests and benchmarks
  // fp8 on compute capability 9.0 and later (Hopper): kernels/fp8.cu quantizes, cuBLASLt
  // multiplies e4m3 x e4m3 with fp32 accumulation (cuda_backend_fp8.cpp).
  bool supports_fp8() const override { return compute_capability_ >= 90; }
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
  // Attention kernels, by TRAINER_ATTENTION (AttentionKernel, runtime/core/attention_state.h):
  // tensor_core runs kernels/flash_attention_mma.cu (mma.sync, tiles in registers; tensor_core_32
  // its forward and dq with 32 rows a warp) and wmma
  // kernels/flash_attention_tc.cu (WMMA), both for a bf16 `out` and head sizes 32, 64 (mma.sync
  // also 80, 96, 128); flash kernels/flash_attention.cu (CUDA cores, kFlashHeadSizes), reference
  // kernels/attention.cu (any head
  // size; also the fallback of the others), cudnn cuDNN's fused attention (cudnn_attention.h;
  // the shapes it refuses run tensor_core's). The flash kernels and cuDNN keep the row
  // log-sum-exp [B,NH,T], the reference the probabilities.
  // cuDNN's attention with TRAINER_ATTENTION=cudnn, else null (its counts: tests, the bench).
  const CudnnAttention* cudnn_attention() const { return cudnn_attention_.get(); }
  Shape attention_state_shape(int64_t B, int64_t NH, int64_t T, int64_t HS) const override;
  void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) override;
  void attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& att, int n_head) override;
  // Context parallelism, over the gathered qkv put in sequence order, the rank's two chunks of
  // query rows: where uses_flash(head size), the flash kernels, keeping the row log-sum-exp
  // [B,NH,Tl]: on tensor cores (flash_attention_mma.cu's) where tensor_core_attention picks them
  // and each chunk is whole 32-row tiles (context_mma), else on CUDA cores (flash_attention.cu's);
  // else (TRAINER_ATTENTION=reference, other head sizes) the reference kernels
  // (kernels/context_attention.cu), keeping the probabilities [B,NH,Tl,T].
  bool supports_context_parallel() const override { return true; }
  Shape attention_cp_state_shape(int64_t B, int64_t NH, int64_t Tl, int64_t T,
                                 int64_t HS) const override;
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
  // kernels/moe.cu; slot and token indices are not range-checked on the device (the router
  // writes them on the host)
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
  // GEMMs with a bias, bias-gradient or GELU epilogue so far: how many ran in cuBLASLt's
  // epilogue, and how many it handed back to the kernels (for the bench and the tests).
  struct EpilogueStats {
    int64_t fused = 0, handed_back = 0;
  };
  const EpilogueStats& epilogue_stats() const { return epilogue_stats_; }

 private:
  // A scratch buffer that only grows (attention's dpre, embedding's sort); stream-ordered reuse.
  void* scratch(void*& buf, size_t& have, size_t need);
  double reduce(const Tensor& x, bool squares, const char* op);
  bool uses_flash(int64_t head_size) const;
  // Which tensor-core family runs attention for this out and head size (none: CUDA cores).
  enum class TensorCoreAttention { none, mma, wmma };
  TensorCoreAttention tensor_core_attention(const Tensor& out, int64_t head_size) const;
  bool context_mma(const Tensor& out, const ContextAttentionDims& d, int n_head) const;
  float* column_scratch(int64_t N, int64_t C);  // partial column sums (bias, layernorm params)
  void run_gemm(LtGemmArgs a);
  // A GEMM with cuBLASLt's bias or GELU epilogue; for a bf16 output whose fp32 bias cuBLASLt has
  // no algorithm for, once more with the bias rounded to bf16 (its default bias type). False:
  // neither ran, the caller does the epilogue's work.
  bool run_fused(LtGemmArgs a);
  // matmul_backward's dout (its dtype checked) as its GEMMs read it: itself, or rounded to bf16
  // (bf16 operands).
  const void* gemm_dout(const Tensor& dout, bool bf16, int64_t n, const char* op);
  // dweight += dout^T inp and dbias += sum_rows(dout) (either may be empty), dout as the GEMMs
  // read it (dy_gemm); dbias from the dweight GEMM's epilogue where cuBLASLt has one.
  void linear_param_grads(Tensor dweight, Tensor dbias, const void* dy_gemm, const Tensor& inp,
                          bool bf16, const LinearDims& d, const char* op);

  int device_ = 0;
  int compute_capability_ = 0;  // major * 10 + minor
  AttentionKernel attention_kernel_ = AttentionKernel::tensor_core;
  mutable bool warned_no_flash_ = false;  // a head size with no flash kernel, said once
  bool gelu_epilogue_ = true;
  bool unmap_released_ = true;  // TRAINER_CUDA_UNMAP
  bool bias_grad_epilogue_ = true;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  DeviceArena arena_;
  std::unique_ptr<ReleasableMemory> releasable_;  // made at the first alloc_releasable
  std::string releasable_why_not_;                // why there is none (kernels())
  bool have_releasable();  // makes releasable_ at the first call where it can
  void* lt_workspace_ = nullptr;
  std::unique_ptr<LtGemm> lt_;
  double* reduce_buf_ = nullptr;  // [0] result, [1..] partials
  void* attn_scratch_ = nullptr;
  size_t attn_scratch_bytes_ = 0;
  void* cp_seq_scratch_ = nullptr;  // context parallelism: the gathered qkv in sequence order
  size_t cp_seq_scratch_bytes_ = 0;
  std::unique_ptr<CudnnAttention> cudnn_attention_;
  // Context-parallel attention calls, by kernels: kernels() reports them.
  int64_t cp_mma_calls_ = 0, cp_flash_calls_ = 0, cp_reference_calls_ = 0;
  void* cudnn_workspace_ = nullptr;
  size_t cudnn_workspace_bytes_ = 0;
  void* emb_scratch_ = nullptr;
  size_t emb_scratch_bytes_ = 0;
  void* col_scratch_ = nullptr;
  size_t col_scratch_bytes_ = 0;
  void* dout_scratch_ = nullptr;  // matmul_backward's dout rounded to bf16
  size_t dout_scratch_bytes_ = 0;
  void* sum_scratch_ = nullptr;  // a GEMM's fp32 sums where cuBLASLt lacks the epilogue
  size_t sum_scratch_bytes_ = 0;
  EpilogueStats epilogue_stats_;
  void* bias_scratch_ = nullptr;  // a bias rounded to bf16 (run_fused)
  size_t bias_scratch_bytes_ = 0;
  void* bias_grad_scratch_ = nullptr;  // the dweight GEMM's bias gradient, before it is added
  size_t bias_grad_scratch_bytes_ = 0;
  void* fp8_scratch_ = nullptr;  // the e4m3 operands, the amax partials and the used scales
  size_t fp8_scratch_bytes_ = 0;
};

}  // namespace trainer::cuda

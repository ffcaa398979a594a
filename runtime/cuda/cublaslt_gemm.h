#pragma once
// LtGemm: row-major GEMMs through cuBLASLt on one stream. fp32 (strict fp32 compute, no TF32, so
// results match the cpu backend to ~1e-6), bf16 inputs with fp32 accumulation, and fp8 e4m3
// inputs with per-tensor descales (Hopper). One plan (descriptors + heuristic's algorithms) is
// cached per shape; optional bias, bias-gradient and GELU epilogues. With tune_algorithms, each
// shape's first calls try the heuristic's algorithms in turn, timed by events, and the shape keeps
// the fastest (runtime/core/algo_trials.h); else it keeps the heuristic's first.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>

namespace trainer::cuda {

struct LtGemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const void* a = nullptr;  // [m,k] (or [k,m] when trans_a), row-major, leading dim lda
  const void* b = nullptr;
  void* c = nullptr;                  // [m,n], ldc
  const void* c_in = nullptr;         // what beta scales when it is not c (c's type and layout)
  int64_t lda = 0, ldb = 0, ldc = 0;  // 0: packed
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  const void* bias = nullptr;  // c[i, j] += bias[j] (length n): fp32, or bf16 with bias_bf16
  bool bias_bf16 = false;      // (cuBLASLt's default bias type is the output's)
  bool bf16_inputs = false;    // a and b hold bf16; c stays fp32 ...
  bool bf16_output = false;    // ... unless this (with bf16_inputs): c, and aux, hold bf16
  // GELU epilogues (cuBLASLt's): gelu_aux stores gelu(sum) in c and the sum itself (bias added)
  // in aux; dgelu stores sum * gelu'(aux) in c (no bias). aux: c's dtype and shape, packed rows
  // of n, n a multiple of 8.
  enum class Epilogue { none, gelu_aux, dgelu };
  Epilogue epilogue = Epilogue::none;
  void* aux = nullptr;
  // The bias gradient in the same GEMM (cuBLASLt's BGRADB; no other epilogue, trans_a, no
  // batch): bias_grad[i] = sum over k of op(a)[i, k], m fp32 values, OVERWRITTEN. With a = dout
  // (op(a) = dout^T), the dweight GEMM's dbias.
  float* bias_grad = nullptr;
  // a and b hold e4m3: c = a_scale * b_scale * op(a) op(b) (+ bias), fp32 or bf16 (bf16_output),
  // the scales being device floats. cuBLASLt's fp8 GEMMs take only trans_b && !trans_a here (its
  // "TN"), and no epilogue but the bias.
  bool fp8_inputs = false;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
};

class LtGemm {
 public:
  LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes,
         bool tune_algorithms = false);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  bool tunes_algorithms() const { return tune_algorithms_; }

  // Returns false (and does nothing) when cuBLASLt has no algorithm for a bias, bias-gradient or
  // GELU epilogue on this shape (or refuses the call), or when refuses_epilogue(args); the caller
  // then does the epilogue's work itself. Throws on every other failure.
  bool run(const LtGemmArgs& args);
  // An epilogue this class does not even ask cuBLASLt for: a GELU aux whose rows (n) are no
  // multiple of 8 (cuBLASLt's rule for its leading dimension), or a bias, bias gradient or aux
  // pointer under 16 bytes of alignment (its kernels may access them with wide loads; no
  // preference covers them; the backend's scratch bias gradient is 256-byte aligned anyway).
  static bool refuses_epilogue(const LtGemmArgs& args);

 private:
  struct Plan;
  // The byte alignment (a power of two up to 256) of each pointer: cuBLASLt picks its algorithm
  // for the alignment it is told (A, B, C/D) or sees (bias, aux) when planning, so a plan is
  // only reused for pointers of the same alignments.
  struct Alignment {
    int a, b, c, bias, aux;
    auto operator<=>(const Alignment&) const = default;
  };
  struct Key {
    bool trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
    bool bias, bias_bf16, bias_grad, bf16_inputs, bf16_output, fp8_inputs;
    LtGemmArgs::Epilogue epilogue;
    Alignment alignment;
    auto operator<=>(const Key&) const = default;
  };
  Plan* plan_for(const LtGemmArgs& g, const Alignment& alignment);
  // Trials (tune_algorithms): the timings whose calls have completed go to the plan's trials.
  static void collect_timings(Plan& plan);

  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  bool tune_algorithms_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace trainer::cuda

#pragma once
// LtGemm: row-major GEMMs through cuBLASLt on one stream. fp32 (strict fp32 compute, no TF32, so
// results match the cpu backend to ~1e-6), bf16 inputs with fp32 accumulation, and fp8 e4m3
// inputs with per-tensor descales (Hopper). One plan (descriptors + heuristic's algorithm) is
// cached per shape; an optional bias epilogue.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace trainer::cuda {

struct LtGemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const void* a = nullptr;  // [m,k] (or [k,m] when trans_a), row-major, leading dim lda
  const void* b = nullptr;
  void* c = nullptr;                  // [m,n], ldc
  int64_t lda = 0, ldb = 0, ldc = 0;  // 0: packed
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  const float* bias = nullptr;  // c[i, j] += bias[j] (fp32, length n)
  bool bf16_inputs = false;     // a and b hold bf16; c stays fp32
  // a and b hold e4m3 (c stays fp32): c = a_scale * b_scale * op(a) op(b), the scales being device
  // floats. cuBLASLt's fp8 GEMMs take only trans_b && !trans_a here (its "TN"), no bias epilogue.
  bool fp8_inputs = false;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
};

class LtGemm {
 public:
  LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Returns false (and does nothing) when cuBLASLt has no algorithm for a bias epilogue on this
  // shape; the caller then adds the bias itself. Throws on every other failure.
  bool run(const LtGemmArgs& args);

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, bool, bool, bool, int>;
  Plan* plan_for(const LtGemmArgs& g, int alignment);

  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace trainer::cuda

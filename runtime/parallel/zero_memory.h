#pragma once
// The ZeRO paper's memory formula for model states per rank: (P + G + K)·Ψ bytes unsharded, with
// Ψ params and Nd data-parallel ranks
//   stage 0: (P+G+K)Ψ   stage 1: (P+G)Ψ + KΨ/Nd   stage 2: PΨ + (G+K)Ψ/Nd   stage 3: (P+G+K)Ψ/Nd.
// Mixed precision (bf16 compute): P=2, G=2, K=12 (fp32 master, m, v). fp32 compute: P=4, G=4 and
// K=8 (Adam m, v; the fp32 params are the master weights).
#include <cstdint>
#include <string>

namespace trainer::parallel {

struct BytesPerParam {
  int params = 4, grads = 4, optimizer = 8;
};

// "fp32" -> 4/4/8; "bf16", "fp8" -> the paper's mixed-precision 2/2/12.
BytesPerParam bytes_per_param(const std::string& compute);

struct ZeroPrediction {
  double params = 0, grads = 0, optimizer = 0;  // bytes per rank
  double total() const { return params + grads + optimizer; }
};

ZeroPrediction predict_zero_memory(int stage, int64_t num_params, int dp, BytesPerParam b);

}  // namespace trainer::parallel

#pragma once
// The ZeRO paper's memory formula for model states per rank: (P + G + K)·Ψ bytes unsharded, with
// Ψ params and Nd data-parallel ranks
//   stage 0: (P+G+K)Ψ   stage 1: (P+G)Ψ + KΨ/Nd   stage 2: PΨ + (G+K)Ψ/Nd   stage 3: (P+G+K)Ψ/Nd.
// With the byte counts this runtime allocates: fp32 compute P=4, G=4, K=8 (Adam m, v; the fp32
// params are the master weights); bf16 and fp8 compute P=6 (the fp32 master weights, which
// layernorm, biases and the embedding read, plus the matmuls' bf16 copy), G=4 (fp32 gradients),
// K=8: 18 bytes per parameter, as Megatron's bf16 with fp32 gradients. The paper's mixed
// precision (P=2, G=2, K=12: the fp32 master in K) is kZeroPaperMixedPrecision.
#include <cstdint>
#include <string>

namespace trainer::parallel {

struct BytesPerParam {
  int params = 4, grads = 4, optimizer = 8;
};

inline constexpr BytesPerParam kZeroPaperMixedPrecision{2, 2, 12};

// "fp32" -> 4/4/8; "bf16", "fp8" -> 6/4/8 (this runtime's allocations).
BytesPerParam bytes_per_param(const std::string& compute);

struct ZeroPrediction {
  double params = 0, grads = 0, optimizer = 0;  // bytes per rank
  double total() const { return params + grads + optimizer; }
};

ZeroPrediction predict_zero_memory(int stage, int64_t num_params, int dp, BytesPerParam b);

// Elements of the units ZeRO 2 and 3 keep whole beyond the formula (zero_optimizer.h): the
// embedding unit (wte and wpe), the largest block and the final norm.
struct LiveUnits {
  int64_t embedding = 0, largest_block = 0, final_norm = 0;
};

// Model-state bytes per rank as this runtime holds them (report.json's memory.breakdown):
//  - a backend that hands released ranges back (cpu; cuda, whose 2 MiB pages the plan adds): the
//    formula, plus in stage 2 the full-size
//    fp32 gradients of the units not yet reduce-scattered (the embedding, which the tied head
//    writes first, and the block in flight), plus in stage 3 the gathered units' params (the
//    embedding, the final norm, and two blocks: a block lands before the one before it is
//    released);
//  - one that keeps its buffers (cuda with TRAINER_CUDA_UNMAP=0): params and grads stay whole in
//    every stage; stage 1 and up shard the optimizer state, and stage 2 and up add a shard-sized
//    fp32 gradient accumulator.
ZeroPrediction predict_held_state(int stage, int64_t num_params, int dp, BytesPerParam b,
                                  bool releases_pages, LiveUnits live);

}  // namespace trainer::parallel

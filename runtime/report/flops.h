#pragma once
// Parameter and FLOP counting for the GPT-2 style model (tied embeddings), and MFU.
// DESIGN.md "Run report": flops_per_token = 6*N + 12*n_layer*d_model*seq_len, where N is the
// non-embedding parameter count; activation recompute is not counted.
#include <cstdint>
#include <string>

namespace trainer::report {

struct ModelDims {
  int64_t vocab_size = 0;  // V
  int64_t seq_len = 0;     // T
  int64_t n_layer = 0;     // L
  int64_t d_model = 0;     // C
  int64_t ffn_mult = 4;    // F: the MLP's hidden width is F*C
};

struct ParamCounts {
  int64_t total = 0;          // every parameter once (the output layer is tied to wte)
  int64_t embedding = 0;      // wte (V*C) + wpe (T*C)
  int64_t non_embedding = 0;  // total - embedding: the N of 6*N
};

// Parameters of one transformer block: two layernorms, qkv, attention projection, MLP.
int64_t count_block_params(const ModelDims& d);
ParamCounts count_params(const ModelDims& d);

// Training FLOPs per token (forward + backward), DESIGN.md's formula.
double flops_per_token(const ModelDims& d);

// FLOPs per token that activation checkpointing adds by recomputing forward work in backward
// (not in flops_per_token, so not in MFU, as Megatron counts it): "selective" reruns each block's
// attention (QK^T and PV: 4*L*C*T, a third of the formula's attention term), "full" each block's
// whole forward (2 FLOPs per block parameter, plus that attention); "none" adds nothing.
double recompute_flops_per_token(const ModelDims& d, const std::string& activation_checkpointing);

// Model FLOPs utilisation as a fraction (0.42 = 42%). NaN when the peak is unknown (<= 0).
double mfu(double flops_per_token, double tokens_per_second, double peak_tflops_per_device,
           int device_count);

// Achieved TFLOP/s per device.
double tflops_per_device(double flops_per_token, double tokens_per_second, int device_count);

}  // namespace trainer::report

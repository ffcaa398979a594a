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
  // Mixture of experts: each block's MLP is num_experts expert MLPs and a router [E, C]; a token
  // runs top_k of them. 0: dense.
  int64_t num_experts = 0;
  int64_t top_k = 0;
};

struct ParamCounts {
  int64_t total = 0;          // every parameter once (the output layer is tied to wte)
  int64_t embedding = 0;      // wte (V*C) + wpe (T*C)
  int64_t non_embedding = 0;  // total - embedding
  // The non-embedding parameters a token runs through, the N of 6*N: non_embedding, but in a
  // mixture of experts only top_k of each block's experts (Megatron's and DeepSeek's "active").
  int64_t active_non_embedding = 0;
};

// Parameters of one transformer block: two layernorms, qkv, attention projection, MLP (a mixture
// of experts: the router and every expert); active: the experts a token runs only.
int64_t count_block_params(const ModelDims& d, bool active = false);
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

#include "runtime/report/flops.h"

#include <limits>

namespace trainer::report {

int64_t count_block_params(const ModelDims& d, bool active) {
  const int64_t C = d.d_model, F = d.ffn_mult;
  const int64_t ln1 = 2 * C;
  const int64_t qkv = 3 * C * C + 3 * C;
  const int64_t attn_proj = C * C + C;
  const int64_t ln2 = 2 * C;
  const int64_t fc = F * C * C + F * C;
  const int64_t fc_proj = F * C * C + C;
  const int64_t attention = ln1 + qkv + attn_proj + ln2;
  if (d.num_experts == 0) return attention + fc + fc_proj;
  const int64_t router = d.num_experts * C;
  return attention + router + (active ? d.top_k : d.num_experts) * (fc + fc_proj);
}

ParamCounts count_params(const ModelDims& d) {
  ParamCounts p;
  p.embedding = d.vocab_size * d.d_model + d.seq_len * d.d_model;
  const int64_t final_ln = 2 * d.d_model;
  p.non_embedding = d.n_layer * count_block_params(d) + final_ln;
  p.active_non_embedding = d.n_layer * count_block_params(d, true) + final_ln;
  p.total = p.embedding + p.non_embedding;
  return p;
}

double flops_per_token(const ModelDims& d) {
  const double n = static_cast<double>(count_params(d).active_non_embedding);
  const double attention = 12.0 * d.n_layer * d.d_model * d.seq_len;
  return 6.0 * n + attention;
}

double recompute_flops_per_token(const ModelDims& d, const std::string& activation_checkpointing) {
  const double attention_forward = 4.0 * d.n_layer * d.d_model * d.seq_len;
  if (activation_checkpointing == "selective") return attention_forward;
  if (activation_checkpointing == "full")
    return 2.0 * static_cast<double>(d.n_layer * count_block_params(d, true)) + attention_forward;
  return 0;
}

double mfu(double flops_per_token, double tokens_per_second, double peak_tflops_per_device,
           int device_count) {
  if (peak_tflops_per_device <= 0 || device_count <= 0)
    return std::numeric_limits<double>::quiet_NaN();
  return flops_per_token * tokens_per_second / (peak_tflops_per_device * 1e12 * device_count);
}

double tflops_per_device(double flops_per_token, double tokens_per_second, int device_count) {
  if (device_count <= 0) return 0;
  return flops_per_token * tokens_per_second / device_count / 1e12;
}

}  // namespace trainer::report

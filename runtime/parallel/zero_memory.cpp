#include "runtime/parallel/zero_memory.h"

#include "runtime/core/check.h"

namespace trainer::parallel {

BytesPerParam bytes_per_param(const std::string& compute) {
  if (compute == "fp32") return {4, 4, 8};
  return {6, 4, 8};
}

ZeroPrediction predict_zero_memory(int stage, int64_t num_params, int dp, BytesPerParam b) {
  TRAINER_CHECK(stage >= 0 && stage <= 3 && dp >= 1, "zero stage " << stage << ", dp " << dp);
  const double psi = static_cast<double>(num_params), nd = dp;
  auto part = [&](int bytes, bool sharded) { return bytes * psi / (sharded ? nd : 1.0); };
  return {part(b.params, stage >= 3), part(b.grads, stage >= 2), part(b.optimizer, stage >= 1)};
}

ZeroPrediction predict_held_state(int stage, int64_t num_params, int dp, BytesPerParam b,
                                  bool releases_pages, LiveUnits live) {
  ZeroPrediction p = predict_zero_memory(stage, num_params, dp, b);
  const double psi = static_cast<double>(num_params), nd = dp;
  if (!releases_pages) {
    p.params = b.params * psi;
    p.grads = b.grads * psi + (stage >= 2 ? b.grads * psi / nd : 0.0);
    return p;
  }
  const double block_pair = static_cast<double>(live.embedding + live.largest_block);
  if (stage >= 2) p.grads += b.grads * block_pair;
  if (stage >= 3)
    p.params += b.params * (block_pair + static_cast<double>(live.final_norm + live.largest_block));
  return p;
}

}  // namespace trainer::parallel

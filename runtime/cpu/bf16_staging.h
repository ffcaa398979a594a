#pragma once
// Bf16Staging: how the cpu backend runs its fp32 math on bf16 tensors (backend.h, "Mixed
// precision"). A bf16 input is widened into an fp32 buffer (exactly); a bf16 output is computed
// into an fp32 buffer and rounded to nearest even once, on commit. f32 tensors pass through
// untouched. Buffers only grow, so a steady-state step allocates nothing.
#include <array>
#include <cstdint>
#include <vector>

#include "runtime/core/tensor.h"

namespace trainer::cpu {

class Bf16Staging {
 public:
  static constexpr int kSlots = 5;
  // The fp32 values of `t` (f32 or bf16); a bf16 tensor is widened into `slot`.
  const float* input(const Tensor& t, int slot, const char* op, const char* arg);
  // src[n] rounded to bf16 values (kept in fp32) in `slot`: a bf16 gradient operand.
  const float* rounded(const float* src, int64_t n, int slot);
  // Where to compute `t` in fp32: its own data, or `slot` when t is bf16 ...
  float* output(const Tensor& t, int slot, const char* op, const char* arg);
  // The same, holding t's values (an op that updates t in place; commit after).
  float* in_out(const Tensor& t, int slot, const char* op, const char* arg);
  // ... and, for bf16, the rounding of that slot into t.
  void commit(const Tensor& t, int slot);

 private:
  float* buffer(int slot, int64_t n);
  std::array<std::vector<float>, kSlots> buffers_;
};

}  // namespace trainer::cpu

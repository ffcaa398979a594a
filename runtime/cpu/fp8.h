#pragma once
// fp8 e4m3 and the delayed-scaling rule of runtime/core/fp8_recipe.h on the cpu: the reference of
// the cuda kernels' tests, and the cpu backend's emulated fp8 GEMM.
#include <cstdint>

#include "runtime/core/fp8_recipe.h"

namespace trainer::cpu {

// Round to nearest even, saturating to +-448 (as cuBLASLt and __NV_SATFINITE do); NaN -> 0x7f.
uint8_t fp8_e4m3_from_float(float f);
float float_from_fp8_e4m3(uint8_t bits);

// The scale that quantizes a call's tensor, from one tensor's part of a state (kFp8TensorFloats
// floats): the state's own (delayed scaling), or, for a fresh state, the one from the call's
// `amax` itself (current scaling).
float fp8_call_scale(const float* tensor_state, float amax);
// Moves one tensor's part of a state on by a (reduced) amax: pushes it into the history and sets
// the next scale and its inverse.
void fp8_push_amax(float* tensor_state, float amax);

}  // namespace trainer::cpu

#pragma once
// fp8 e4m3 and the delayed-scaling rule of runtime/core/fp8_recipe.h on the cpu: the reference of
// the cuda kernels' tests, and the cpu backend's emulated fp8 GEMM.
#include <cstdint>

#include "runtime/core/fp8_recipe.h"

namespace trainer::cpu {

// Round to nearest even, saturating to +-448 (as cuBLASLt and __NV_SATFINITE do); NaN -> 0x7f.
uint8_t fp8_e4m3_from_float(float f);
float float_from_fp8_e4m3(uint8_t bits);

// One tensor's part of a state (kFp8TensorFloats floats) after a call that saw `amax`. Returns
// the scale that quantizes this call's tensor: the previous one (delayed scaling), or, for a
// fresh state, the one from `amax` itself (current scaling).
float fp8_update_scaling(float* tensor_state, float amax);

}  // namespace trainer::cpu

#pragma once
// Argument checks of the CudaBackend ops: runtime/core/op_checks.h on cuda tensors. `op` names
// the op in every message.
#include "runtime/core/op_checks.h"

namespace trainer::cuda {

inline void check_device(const Tensor& t, const char* op, const char* arg) {
  check_on(t, DeviceType::cuda, op, arg);
}

inline float* need_f32(const Tensor& t, const char* op, const char* arg) {
  return static_cast<float*>(need_typed(t, DType::f32, DeviceType::cuda, op, arg));
}

// The fp32 data of an optional argument, or null when absent.
inline float* opt_f32(const Tensor& t, const char* op, const char* arg) {
  return t.empty() ? nullptr : need_f32(t, op, arg);
}

inline const int32_t* need_i32(const Tensor& t, const char* op, const char* arg) {
  return static_cast<const int32_t*>(need_typed(t, DType::i32, DeviceType::cuda, op, arg));
}

}  // namespace trainer::cuda

#pragma once
// Argument checks of the CudaBackend ops: device, dtype and element counts (the shape helpers
// are the cpu backend's, runtime/cpu/tensor_checks.h). `op` names the op in every message.
#include "runtime/core/check.h"
#include "runtime/core/tensor.h"
#include "runtime/cpu/tensor_checks.h"

namespace trainer::cuda {

using cpu::check_numel;
using cpu::last_dim;
using cpu::rows_of;

inline void check_device(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(t.device == DeviceType::cuda,
                op << ": " << arg << " is not a cuda tensor (shape " << t.shape.str() << ")");
}

inline float* need_f32(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(!t.empty(), op << ": " << arg << " is required");
  TRAINER_CHECK(t.dtype == DType::f32,
                op << ": " << arg << " must be f32, got " << dtype_name(t.dtype));
  check_device(t, op, arg);
  return static_cast<float*>(t.data);
}

inline float* opt_f32(const Tensor& t, const char* op, const char* arg) {
  return t.empty() ? nullptr : need_f32(t, op, arg);
}

inline const int32_t* need_i32(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(!t.empty(), op << ": " << arg << " is required");
  TRAINER_CHECK(t.dtype == DType::i32,
                op << ": " << arg << " must be i32, got " << dtype_name(t.dtype));
  check_device(t, op, arg);
  return static_cast<const int32_t*>(t.data);
}

}  // namespace trainer::cuda

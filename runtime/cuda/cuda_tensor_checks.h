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

// The data of a linear layer's operand (f32 or bf16; matmul_operand_dtype checks they agree).
inline const void* need_operand(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(!t.empty(), op << ": " << arg << " is required");
  check_device(t, op, arg);
  return t.data;
}

// The same for an output the caller has checked to have the operands' dtype.
inline void* need_operand_out(const Tensor& t, const char* op, const char* arg) {
  return const_cast<void*>(need_operand(t, op, arg));
}

// Calls f with the typed output pointer: float* for f32, uint16_t* (bf16 bits) for bf16.
template <class F>
void with_float_out(const Tensor& out, const char* op, const char* arg, F&& f) {
  check_float_out(out, op, arg);
  check_device(out, op, arg);
  if (out.dtype == DType::bf16)
    f(static_cast<uint16_t*>(out.data));
  else
    f(static_cast<float*>(out.data));
}

// The same for an input that may be bf16: f(const float*) or f(const uint16_t*).
template <class F>
void with_float_in(const Tensor& in, const char* op, const char* arg, F&& f) {
  check_float_out(in, op, arg);
  check_device(in, op, arg);
  if (in.dtype == DType::bf16)
    f(static_cast<const uint16_t*>(in.data));
  else
    f(static_cast<const float*>(in.data));
}

inline const int32_t* need_i32(const Tensor& t, const char* op, const char* arg) {
  return static_cast<const int32_t*>(need_typed(t, DType::i32, DeviceType::cuda, op, arg));
}

}  // namespace trainer::cuda

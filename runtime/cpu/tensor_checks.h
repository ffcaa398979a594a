#pragma once
// Argument checks of the CpuBackend ops: runtime/core/op_checks.h on cpu tensors, plus the token
// range check the cpu loops need. `op` names the op in every message.
#include <cstdint>

#include "runtime/core/op_checks.h"

namespace trainer::cpu {

inline void check_host(const Tensor& t, const char* op, const char* arg) {
  check_on(t, DeviceType::cpu, op, arg);
}

// The fp32 data of a required argument.
inline float* need_f32(const Tensor& t, const char* op, const char* arg) {
  return static_cast<float*>(need_typed(t, DType::f32, DeviceType::cpu, op, arg));
}

// The fp32 data of an optional argument, or null when absent.
inline float* opt_f32(const Tensor& t, const char* op, const char* arg) {
  return t.empty() ? nullptr : need_f32(t, op, arg);
}

inline const int32_t* need_i32(const Tensor& t, const char* op, const char* arg) {
  return static_cast<const int32_t*>(need_typed(t, DType::i32, DeviceType::cpu, op, arg));
}

// Every token in [0, vocab): checked before the parallel loops, which must not throw.
inline void check_tokens(const int32_t* tok, int64_t n, int64_t vocab, const char* op,
                         const char* arg, bool allow_negative) {
  for (int64_t i = 0; i < n; ++i)
    TRAINER_CHECK(
        tok[i] < vocab && (allow_negative || tok[i] >= 0),
        op << ": " << arg << "[" << i << "] = " << tok[i] << " outside [0, " << vocab << ")");
}

}  // namespace trainer::cpu

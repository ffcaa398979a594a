#pragma once
// Shape and dtype checks shared by the CpuBackend ops. `op` names the op in every message.
#include <cstdint>

#include "runtime/core/check.h"
#include "runtime/core/tensor.h"

namespace trainer::cpu {

inline void check_host(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(t.device == DeviceType::cpu,
                op << ": " << arg << " is not a cpu tensor (shape " << t.shape.str() << ")");
}

// The fp32 data of a required argument.
inline float* need_f32(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(!t.empty(), op << ": " << arg << " is required");
  TRAINER_CHECK(t.dtype == DType::f32,
                op << ": " << arg << " must be f32, got " << dtype_name(t.dtype));
  check_host(t, op, arg);
  return static_cast<float*>(t.data);
}

// The fp32 data of an optional argument, or null when absent.
inline float* opt_f32(const Tensor& t, const char* op, const char* arg) {
  return t.empty() ? nullptr : need_f32(t, op, arg);
}

inline const int32_t* need_i32(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(!t.empty(), op << ": " << arg << " is required");
  TRAINER_CHECK(t.dtype == DType::i32,
                op << ": " << arg << " must be i32, got " << dtype_name(t.dtype));
  check_host(t, op, arg);
  return static_cast<const int32_t*>(t.data);
}

inline int64_t last_dim(const Tensor& t) {
  return t.shape.rank == 0 ? 0 : t.shape[t.shape.rank - 1];
}

// Rows of a [..., cols] activation.
inline int64_t rows_of(const Tensor& t, int64_t cols, const char* op, const char* arg) {
  TRAINER_CHECK(cols > 0 && t.numel() % cols == 0,
                op << ": " << arg << " " << t.shape.str() << " is not a multiple of " << cols);
  return t.numel() / cols;
}

inline void check_numel(const Tensor& t, int64_t numel, const char* op, const char* arg) {
  TRAINER_CHECK(t.numel() == numel, op << ": " << arg << " " << t.shape.str() << " should have "
                                       << numel << " elements");
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

#pragma once
// Argument checks every Backend runs before an op: presence, dtype, device, element counts, and
// the dims of the common layouts. `op` names the op and `arg` the argument in every message.
// The backends wrap the device-taking ones with their own device (cpu/tensor_checks.h,
// cuda/cuda_tensor_checks.h).
#include <cstdint>
#include <utility>

#include "runtime/core/backend.h"
#include "runtime/core/check.h"
#include "runtime/core/fp8_recipe.h"
#include "runtime/core/tensor.h"

namespace trainer {

inline const char* device_name(DeviceType d) {
  return d == DeviceType::cpu ? "cpu" : "cuda";
}

inline void check_on(const Tensor& t, DeviceType dev, const char* op, const char* arg) {
  TRAINER_CHECK(t.device == dev, op << ": " << arg << " is not a " << device_name(dev)
                                    << " tensor (shape " << t.shape.str() << ")");
}

// The data of a required argument of dtype `want` on `dev`.
inline void* need_typed(const Tensor& t, DType want, DeviceType dev, const char* op,
                        const char* arg) {
  TRAINER_CHECK(!t.empty(), op << ": " << arg << " is required");
  TRAINER_CHECK(t.dtype == want, op << ": " << arg << " must be " << dtype_name(want) << ", got "
                                    << dtype_name(t.dtype));
  check_on(t, dev, op, arg);
  return t.data;
}

// The dtype of a linear layer's operands: inp and weight both f32 or both bf16 (backend.h).
inline DType matmul_operand_dtype(const Tensor& inp, const Tensor& weight, const char* op) {
  TRAINER_CHECK(inp.dtype == weight.dtype && (inp.dtype == DType::f32 || inp.dtype == DType::bf16),
                op << ": inp and weight must both be f32 or both bf16, got "
                   << dtype_name(inp.dtype) << " and " << dtype_name(weight.dtype));
  return inp.dtype;
}

// Attention's qkv: fp32, or bf16 with a bf16 out (bf16 compute; backend.h).
inline void check_qkv_dtype(const Tensor& qkv, DType out, const char* op) {
  TRAINER_CHECK(qkv.dtype == DType::f32 || (qkv.dtype == DType::bf16 && out == DType::bf16),
                op << ": qkv must be f32, or bf16 with a bf16 out; got qkv "
                   << dtype_name(qkv.dtype) << " and out " << dtype_name(out));
}

// Attention's dqkv: fp32, or bf16 with a bf16 qkv (bf16 compute; backend.h).
inline void check_dqkv_dtype(const Tensor& dqkv, const Tensor& qkv, const char* op) {
  TRAINER_CHECK(dqkv.dtype == DType::f32 || (dqkv.dtype == DType::bf16 && qkv.dtype == DType::bf16),
                op << ": dqkv must be f32, or bf16 with a bf16 qkv; got dqkv "
                   << dtype_name(dqkv.dtype) << " and qkv " << dtype_name(qkv.dtype));
}

// A linear layer's out (matmul_forward) or dout (matmul_backward), `arg`: fp32, or bf16 when the
// operands are bf16 (backend.h).
inline void check_linear_activation_dtype(const Tensor& t, DType operands, const char* op,
                                          const char* arg) {
  TRAINER_CHECK(t.dtype == DType::f32 || (t.dtype == DType::bf16 && operands == DType::bf16),
                op << ": " << arg << " must be f32" << (operands == DType::bf16 ? " or bf16" : "")
                   << " with " << dtype_name(operands) << " operands, got " << dtype_name(t.dtype));
}

// The fused GELU ops' dtypes: inp and weight agree (matmul_operand_dtype), and the activations
// a and b (out and pre; dpre and pre) have theirs. Returns it.
inline DType gelu_operand_dtype(const Tensor& inp, const Tensor& weight, const Tensor& a,
                                const char* a_name, const Tensor& b, const char* b_name,
                                const char* op) {
  const DType operands = matmul_operand_dtype(inp, weight, op);
  for (const auto& [t, arg] : {std::pair{&a, a_name}, std::pair{&b, b_name}})
    TRAINER_CHECK(t->dtype == operands, op << ": " << arg << " must be " << dtype_name(operands)
                                           << " like the operands, got " << dtype_name(t->dtype));
  return operands;
}

// An output that may be stored in bf16 (the input of a matmul): f32 or bf16.
inline void check_float_out(const Tensor& t, const char* op, const char* arg) {
  TRAINER_CHECK(!t.empty(), op << ": " << arg << " is required");
  TRAINER_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16,
                op << ": " << arg << " must be f32 or bf16, got " << dtype_name(t.dtype));
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

// A bf16 copy an op may write besides its fp32 result (an optimizer step's weight copy, a
// layernorm backward's dinp_bf16): bf16, `numel` elements.
inline void check_bf16_copy(const Tensor& t, int64_t numel, const char* op,
                            const char* arg = "params_bf16") {
  TRAINER_CHECK(t.dtype == DType::bf16,
                op << ": " << arg << " must be bf16, got " << dtype_name(t.dtype));
  check_numel(t, numel, op, arg);
}

// fp8_push_amaxes: n amaxes for n * kFp8TensorFloats state floats. Returns n.
inline int64_t fp8_push_parts(const Tensor& states, const Tensor& amaxes, const char* op) {
  check_numel(states, amaxes.numel() * kFp8TensorFloats, op, "fp8_states");
  return amaxes.numel();
}

// [OC, C] of a linear weight.
inline void weight_dims(const Tensor& w, int64_t& oc, int64_t& c, const char* op) {
  TRAINER_CHECK(w.shape.rank == 2, op << ": weight " << w.shape.str() << " must be [OC, C]");
  oc = w.shape[0], c = w.shape[1];
}

// B, T, C of qkv [B, T, 3C], with C divisible by n_head.
inline void attention_dims(const Tensor& qkv, int n_head, int64_t& B, int64_t& T, int64_t& C,
                           const char* op) {
  TRAINER_CHECK(qkv.shape.rank == 3 && qkv.shape[2] % 3 == 0,
                op << ": qkv " << qkv.shape.str() << " must be [B, T, 3C]");
  B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  TRAINER_CHECK(n_head > 0 && C % n_head == 0,
                op << ": C = " << C << " is not divisible by n_head = " << n_head);
}

// B and T of a [B,T] token tensor, or of a [B,T,C] activation when tokens are flat.
inline void batch_and_seq(const Tensor& tokens, const Tensor& act, int64_t& B, int64_t& T,
                          const char* op) {
  if (tokens.shape.rank == 2) {
    B = tokens.shape[0], T = tokens.shape[1];
  } else {
    TRAINER_CHECK(act.shape.rank == 3, op << ": need tokens [B,T] or an activation [B,T,C], got "
                                          << tokens.shape.str() << " and " << act.shape.str());
    B = act.shape[0], T = act.shape[1];
  }
  check_numel(tokens, B * T, op, "tokens");
}

// wpe [maxT, C] must cover positions pos_offset .. pos_offset + T - 1.
inline void check_positions(const Tensor& wpe, int64_t pos_offset, int64_t T, int64_t C,
                            const char* op) {
  TRAINER_CHECK(wpe.shape.rank == 2 && wpe.shape[1] == C,
                op << ": wpe " << wpe.shape.str() << " must be [max_T, " << C << "]");
  TRAINER_CHECK(pos_offset >= 0 && pos_offset + T <= wpe.shape[0],
                op << ": positions [" << pos_offset << ", " << pos_offset + T
                   << ") exceed wpe rows " << wpe.shape[0]);
}

// Element count of an AdamW step over params/grads/m/v of equal size, with a 1-based step.
inline int64_t adamw_numel(const Tensor& params, const Tensor& grads, const Tensor& m,
                           const Tensor& v, const AdamWParams& p, const char* op) {
  const int64_t n = params.numel();
  check_numel(grads, n, op, "grads");
  check_numel(m, n, op, "m");
  check_numel(v, n, op, "v");
  TRAINER_CHECK(p.step >= 1, op << ": step " << p.step << " must be >= 1");
  return n;
}

}  // namespace trainer

// CpuBackend: the emulated fp8 forward GEMM (runtime/core/fp8_recipe.h), the reference the cuda
// backend's fp8 path is tested against.
#include <cmath>

#include "runtime/core/op_checks.h"
#include "runtime/core/op_shapes.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/fp8.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/tensor_checks.h"

namespace trainer::cpu {
namespace {

// q[i] = the e4m3 value of x[i] * scale, for the scale that `tensor_state` gives this call (and
// the state moves on by this call's amax). Returns 1/scale: the factor that undoes it.
float quantize(std::vector<float>& q, const float* x, int64_t n, float* tensor_state) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = fp8_update_scaling(tensor_state, amax);
  q.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    q[static_cast<size_t>(i)] = float_from_fp8_e4m3(fp8_e4m3_from_float(x[i] * scale));
  return 1.0f / scale;
}

}  // namespace

void CpuBackend::matmul_forward_fp8(Tensor out, const Tensor& inp, const Tensor& weight,
                                    const Tensor& bias, Tensor fp8_state) {
  const char* op = "matmul_forward_fp8";
  const LinearDims d = matmul_forward_dims(out, inp, weight, bias);
  TRAINER_CHECK(matmul_operand_dtype(inp, weight, op) == DType::bf16,
                op << ": inp and weight must be bf16 (the bf16 weight copy and activations)");
  check_numel(fp8_state, kFp8StateFloats, op, "fp8_state");
  float* state = need_f32(fp8_state, op, "fp8_state");
  const float inv_in = quantize(fp8_inp_, staging_.input(inp, 0, op, "inp"), d.N * d.C, state);
  const float inv_w = quantize(fp8_weight_, staging_.input(weight, 1, op, "weight"), d.OC * d.C,
                               state + kFp8TensorFloats);
  float* y = need_f32(out, op, "out");
  cpu::matmul_forward(y, fp8_inp_.data(), fp8_weight_.data(), static_cast<const float*>(nullptr),
                      d.N, d.C, d.OC);
  const float descale = inv_in * inv_w;
  const float* b = opt_f32(bias, op, "bias");
  for (int64_t r = 0; r < d.N; ++r)
    for (int64_t c = 0; c < d.OC; ++c) {
      float& v = y[r * d.OC + c];
      v = v * descale + (b ? b[c] : 0.0f);
    }
}

}  // namespace trainer::cpu

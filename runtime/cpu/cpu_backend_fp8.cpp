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

// q[i] = the e4m3 value of x[i] * scale, for the scale that `tensor_state` gives this call;
// *amax is raised to amax(|x|) (std::fmax: a NaN *amax counts as nothing). Returns 1/scale: the
// factor that undoes it.
float quantize(std::vector<float>& q, const float* x, int64_t n, const float* tensor_state,
               float* amax) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  *amax = std::fmax(*amax, m);
  const float scale = fp8_call_scale(tensor_state, m);
  q.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    q[static_cast<size_t>(i)] = float_from_fp8_e4m3(fp8_e4m3_from_float(x[i] * scale));
  return 1.0f / scale;
}

}  // namespace

void CpuBackend::matmul_forward_fp8(Tensor out, const Tensor& inp, const Tensor& weight,
                                    const Tensor& bias, const Tensor& fp8_state, Tensor fp8_amax) {
  const char* op = "matmul_forward_fp8";
  const LinearDims d = matmul_forward_dims(out, inp, weight, bias);
  TRAINER_CHECK(matmul_operand_dtype(inp, weight, op) == DType::bf16,
                op << ": inp and weight must be bf16 (the bf16 weight copy and activations)");
  check_numel(fp8_state, kFp8StateFloats, op, "fp8_state");
  check_numel(fp8_amax, 2, op, "fp8_amax");
  const float* state = need_f32(fp8_state, op, "fp8_state");
  float* amax = need_f32(fp8_amax, op, "fp8_amax");
  const float inv_in =
      quantize(fp8_inp_, staging_.input(inp, 0, op, "inp"), d.N * d.C, state, amax);
  const float inv_w = quantize(fp8_weight_, staging_.input(weight, 1, op, "weight"), d.OC * d.C,
                               state + kFp8TensorFloats, amax + 1);
  check_linear_activation_dtype(out, DType::bf16, op, "out");
  float* y = staging_.output(out, 3, op, "out");  // a bf16 out: fp32 sums, rounded at commit
  cpu::matmul_forward(y, fp8_inp_.data(), fp8_weight_.data(), static_cast<const float*>(nullptr),
                      d.N, d.C, d.OC);
  const float descale = inv_in * inv_w;
  const float* b = opt_f32(bias, op, "bias");
  for (int64_t r = 0; r < d.N; ++r)
    for (int64_t c = 0; c < d.OC; ++c) {
      float& v = y[r * d.OC + c];
      v = v * descale + (b ? b[c] : 0.0f);
    }
  staging_.commit(out, 3);
}

void CpuBackend::fp8_push_amaxes(Tensor fp8_states, const Tensor& amaxes) {
  const char* op = "fp8_push_amaxes";
  const int64_t parts = fp8_push_parts(fp8_states, amaxes, op);
  float* states = need_f32(fp8_states, op, "fp8_states");
  const float* a = need_f32(amaxes, op, "amaxes");
  for (int64_t i = 0; i < parts; ++i) fp8_push_amax(states + i * kFp8TensorFloats, a[i]);
}

}  // namespace trainer::cpu

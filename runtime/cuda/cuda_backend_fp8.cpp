// CudaBackend: the fp8 forward GEMM of a linear layer (runtime/core/fp8_recipe.h).
#include <string>

#include "kernels/kernels.h"
#include "runtime/core/fp8_recipe.h"
#include "runtime/core/op_checks.h"
#include "runtime/core/op_shapes.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_tensor_checks.h"

namespace trainer::cuda {

void CudaBackend::matmul_forward_fp8(Tensor out, const Tensor& inp, const Tensor& weight,
                                     const Tensor& bias, const Tensor& fp8_state, Tensor fp8_amax) {
  const char* op = "matmul_forward_fp8";
  if (!supports_fp8())
    throw CudaError(std::string(op) + ": fp8 needs compute capability 9.0 (Hopper) or later; " +
                    device_name_ + " has " + std::to_string(compute_capability_ / 10) + "." +
                    std::to_string(compute_capability_ % 10));
  const LinearDims d = matmul_forward_dims(out, inp, weight, bias);
  TRAINER_CHECK(matmul_operand_dtype(inp, weight, op) == DType::bf16,
                op << ": inp and weight must be bf16 (the bf16 weight copy and activations)");
  check_numel(fp8_state, kFp8StateFloats, op, "fp8_state");
  check_numel(fp8_amax, 2, op, "fp8_amax");
  const float* state = need_f32(fp8_state, op, "fp8_state");
  float* amax = need_f32(fp8_amax, op, "fp8_amax");
  // Every operand checked before the first launch: a host tensor is refused, not read by a kernel.
  const auto* inp_bf16 = static_cast<const uint16_t*>(need_operand(inp, op, "inp"));
  const auto* weight_bf16 = static_cast<const uint16_t*>(need_operand(weight, op, "weight"));
  check_linear_activation_dtype(out, DType::bf16, op, "out");
  void* out_data = need_operand_out(out, op, "out");
  float* bias_data = opt_f32(bias, op, "bias");
  // Scratch: inp and weight in e4m3 (each 256-byte aligned for cuBLASLt), the amax partials, and
  // the used scale and its inverse per operand, each in its own 256 bytes (cuBLASLt refused every
  // algorithm for a descale 4 bytes past an aligned address: an H200, cuBLASLt 13.1).
  const auto aligned = [](int64_t bytes) { return (static_cast<size_t>(bytes) + 255) / 256 * 256; };
  const size_t inp_bytes = aligned(d.N * d.C), weight_bytes = aligned(d.OC * d.C);
  const size_t partial_bytes = aligned(int64_t{kernels::kReducePartials} * 4);
  auto* base = static_cast<char*>(scratch(fp8_scratch_, fp8_scratch_bytes_,
                                          inp_bytes + weight_bytes + partial_bytes + 4 * 256));
  auto* q_inp = reinterpret_cast<uint8_t*>(base);
  auto* q_weight = reinterpret_cast<uint8_t*>(base + inp_bytes);
  auto* partials = reinterpret_cast<float*>(base + inp_bytes + weight_bytes);
  char* scales = base + inp_bytes + weight_bytes + partial_bytes;
  const auto scale_slot = [&](int i) { return reinterpret_cast<float*>(scales + i * 256); };
  kernels::fp8_quantize_delayed(q_inp, inp_bf16, d.N * d.C, state, amax, scale_slot(0),
                                scale_slot(1), partials, stream_);
  kernels::fp8_quantize_delayed(q_weight, weight_bf16, d.OC * d.C, state + kFp8TensorFloats,
                                amax + 1, scale_slot(2), scale_slot(3), partials, stream_);
  // The bias rides in cuBLASLt's epilogue, and a bf16 out is the GEMM's own output; where
  // cuBLASLt refuses either with fp8 inputs, run_gemm falls back to fp32 sums, the bias kernel
  // and a cast, as for bf16 inputs.
  LtGemmArgs g;
  g.fp8_inputs = true;
  g.bf16_output = out.dtype == DType::bf16;
  g.trans_b = true, g.m = d.N, g.n = d.OC, g.k = d.C;
  g.a = q_inp, g.b = q_weight, g.c = out_data;
  g.bias = bias_data;
  g.a_scale = scale_slot(1), g.b_scale = scale_slot(3);  // the inverses: the descales
  run_gemm(g);
}

void CudaBackend::fp8_push_amaxes(Tensor fp8_states, const Tensor& amaxes) {
  const char* op = "fp8_push_amaxes";
  const int64_t parts = fp8_push_parts(fp8_states, amaxes, op);
  kernels::fp8_push_amaxes(need_f32(fp8_states, op, "fp8_states"), need_f32(amaxes, op, "amaxes"),
                           parts, stream_);
}

}  // namespace trainer::cuda

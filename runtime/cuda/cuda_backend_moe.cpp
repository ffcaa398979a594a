// CudaBackend: the mixture of experts' row moves (kernels/moe.cu).
#include "kernels/kernels.h"
#include "runtime/core/op_shapes.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_tensor_checks.h"

namespace trainer::cuda {

void CudaBackend::moe_gather_rows(Tensor out, const Tensor& inp, const Tensor& token_of_slot,
                                  const Tensor& scale) {
  const char* op = "moe_gather_rows";
  const MoeRowDims d = moe_gather_rows_dims(out, inp, token_of_slot, scale);
  check_device(out, op, "out");
  check_device(inp, op, "inp");
  TRAINER_CHECK(out.dtype != DType::i32 && inp.dtype != DType::i32,
                op << ": out and inp must be f32 or bf16");
  const int32_t* tok = need_i32(token_of_slot, op, "token_of_slot");
  const float* a = opt_f32(scale, op, "scale");
  const bool out_bf16 = out.dtype == DType::bf16, in_bf16 = inp.dtype == DType::bf16;
  auto* of = static_cast<float*>(out.data);
  auto* ob = static_cast<uint16_t*>(out.data);
  const auto* xf = static_cast<const float*>(inp.data);
  const auto* xb = static_cast<const uint16_t*>(inp.data);
  if (out_bf16 && in_bf16)
    kernels::moe_gather_rows(ob, xb, tok, a, d.S, d.C, stream_);
  else if (out_bf16)
    kernels::moe_gather_rows(ob, xf, tok, a, d.S, d.C, stream_);
  else if (in_bf16)
    kernels::moe_gather_rows(of, xb, tok, a, d.S, d.C, stream_);
  else
    kernels::moe_gather_rows(of, xf, tok, a, d.S, d.C, stream_);
}

void CudaBackend::moe_combine_rows(Tensor out, const Tensor& inp, const Tensor& slot,
                                   const Tensor& weight) {
  const char* op = "moe_combine_rows";
  const MoeRowDims d = moe_combine_rows_dims(out, inp, slot, weight);
  kernels::moe_combine_rows(need_f32(out, op, "out"), need_f32(inp, op, "inp"),
                            need_i32(slot, op, "slot"), opt_f32(weight, op, "weight"), d.N, d.K,
                            d.C, stream_);
}

void CudaBackend::moe_gate_grad(Tensor dweight, const Tensor& dout, const Tensor& inp,
                                const Tensor& slot) {
  const char* op = "moe_gate_grad";
  const MoeRowDims d = moe_gate_grad_dims(dweight, dout, inp, slot);
  kernels::moe_gate_grad(need_f32(dweight, op, "dweight"), need_f32(dout, op, "dout"),
                         need_f32(inp, op, "inp"), need_i32(slot, op, "slot"), d.N, d.K, d.C,
                         stream_);
}

}  // namespace trainer::cuda

// CpuBackend: the mixture of experts' row moves (runtime/cpu/ops_moe.h). Slot and token indices
// are checked before the threaded loops, which must not throw.
#include "runtime/core/op_shapes.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/tensor_checks.h"

namespace trainer::cpu {

void CpuBackend::moe_gather_rows(Tensor out, const Tensor& inp, const Tensor& token_of_slot,
                                 const Tensor& scale) {
  const char* op = "moe_gather_rows";
  const MoeRowDims d = moe_gather_rows_dims(out, inp, token_of_slot, scale);
  const int32_t* tok = need_i32(token_of_slot, op, "token_of_slot");
  check_tokens(tok, d.S, d.N, op, "token_of_slot", true);
  cpu::moe_gather_rows(staging_.output(out, 3, op, "out"), staging_.input(inp, 0, op, "inp"), tok,
                       opt_f32(scale, op, "scale"), d.S, d.C);
  staging_.commit(out, 3);
}

void CpuBackend::moe_combine_rows(Tensor out, const Tensor& inp, const Tensor& slot,
                                  const Tensor& weight) {
  const char* op = "moe_combine_rows";
  const MoeRowDims d = moe_combine_rows_dims(out, inp, slot, weight);
  const int32_t* slots = need_i32(slot, op, "slot");
  check_tokens(slots, d.N * d.K, d.S, op, "slot", true);
  cpu::moe_combine_rows(need_f32(out, op, "out"), need_f32(inp, op, "inp"), slots,
                        opt_f32(weight, op, "weight"), d.N, d.K, d.C);
}

void CpuBackend::moe_gate_grad(Tensor dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& slot) {
  const char* op = "moe_gate_grad";
  const MoeRowDims d = moe_gate_grad_dims(dweight, dout, inp, slot);
  const int32_t* slots = need_i32(slot, op, "slot");
  check_tokens(slots, d.N * d.K, d.S, op, "slot", true);
  cpu::moe_gate_grad(need_f32(dweight, op, "dweight"), need_f32(dout, op, "dout"),
                     need_f32(inp, op, "inp"), slots, d.N, d.K, d.C);
}

}  // namespace trainer::cpu

#include "runtime/cpu/bf16_staging.h"

#include "runtime/cpu/ops.h"
#include "runtime/cpu/tensor_checks.h"

namespace trainer::cpu {

float* Bf16Staging::buffer(int slot, int64_t n) {
  std::vector<float>& b = buffers_.at(static_cast<size_t>(slot));
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

const float* Bf16Staging::input(const Tensor& t, int slot, const char* op, const char* arg) {
  if (t.dtype != DType::bf16) return need_f32(t, op, arg);
  check_host(t, op, arg);
  const int64_t n = t.numel();
  const auto* src = static_cast<const uint16_t*>(t.data);
  float* dst = buffer(slot, n);
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) dst[i] = float_from_bf16_bits(src[i]);
  return dst;
}

const float* Bf16Staging::rounded(const float* src, int64_t n, int slot) {
  float* dst = buffer(slot, n);
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
  return dst;
}

float* Bf16Staging::output(const Tensor& t, int slot, const char* op, const char* arg) {
  check_float_out(t, op, arg);
  check_host(t, op, arg);
  return t.dtype == DType::bf16 ? buffer(slot, t.numel()) : static_cast<float*>(t.data);
}

float* Bf16Staging::in_out(const Tensor& t, int slot, const char* op, const char* arg) {
  if (t.dtype != DType::bf16) return output(t, slot, op, arg);
  return const_cast<float*>(input(t, slot, op, arg));  // the slot's own buffer: writable
}

void Bf16Staging::commit(const Tensor& t, int slot) {
  if (t.dtype != DType::bf16) return;
  const int64_t n = t.numel();
  const float* src = buffers_.at(static_cast<size_t>(slot)).data();
  auto* dst = static_cast<uint16_t*>(t.data);
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_from_float(src[i]);
}

}  // namespace trainer::cpu

#pragma once
// bf16 storage in kernels: bits as uint16_t, rounded exactly like the cpu backend. Plain device
// code with no CUDA headers (tests/unit/kernels runs the kernels on the cpu).
#include <cstdint>

namespace trainer::kernels {

// The cpu backend's bf16_bits_from_float (round to nearest even, NaN kept quiet), bit for bit.
__device__ inline uint16_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ inline float from_bf16_bits(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// The lower and the upper bf16 of a packed pair, as fp32.
__device__ inline float bf16_lo(uint32_t pair) {
  return __uint_as_float(pair << 16);
}
__device__ inline float bf16_hi(uint32_t pair) {
  return __uint_as_float(pair & 0xffff0000u);
}

// lo and hi rounded to bf16 (to nearest even, as bf16_bits rounds finite values; a NaN becomes the
// canonical one) and packed, lo in the low half: one cvt instruction on the device, where
// bf16_bits' integer rounding would cost a dozen per pair.
__device__ inline uint32_t pack_bf16(float lo, float hi) {
#ifdef TRAINER_CUDA_EMULATION
  return static_cast<uint32_t>(bf16_bits(lo)) | (static_cast<uint32_t>(bf16_bits(hi)) << 16);
#else
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
#endif
}

// Stores an fp32 result into an fp32 output, or rounded into a bf16 (uint16 bits) output.
__device__ inline void store_out(float* p, float v) {
  *p = v;
}
__device__ inline void store_out(uint16_t* p, float v) {
  *p = bf16_bits(v);
}

// Reads an fp32 input, or a bf16 (uint16 bits) one, as fp32.
__device__ inline float load_in(const float* p) {
  return *p;
}
__device__ inline float load_in(const uint16_t* p) {
  return from_bf16_bits(*p);
}

}  // namespace trainer::kernels

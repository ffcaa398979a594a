#pragma once
// 16-byte global memory accesses (ld/st .v4 on the device; memcpy in the cpu emulation), for
// kernels that stream rows: one instruction moves 8 bf16 or 4 fp32.
#include <cstdint>
#ifdef TRAINER_CUDA_EMULATION
#include <cstring>
#endif

namespace trainer::kernels {

// 16 bytes at a 16-byte aligned p, in one access.
__device__ inline void load16(uint32_t (&w)[4], const void* p) {
#ifdef TRAINER_CUDA_EMULATION
  std::memcpy(w, p, 16);
#else
  const uint4 v = *static_cast<const uint4*>(p);
  w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
#endif
}
__device__ inline void store16(void* p, const uint32_t (&w)[4]) {
#ifdef TRAINER_CUDA_EMULATION
  std::memcpy(p, w, 16);
#else
  *static_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
#endif
}
// 4 floats at a 16-byte aligned p, in one access, and back.
__device__ inline void load_floats4(float (&f)[4], const float* p) {
  uint32_t w[4];
  load16(w, p);
  for (int k = 0; k < 4; ++k) f[k] = __uint_as_float(w[k]);
}
__device__ inline void store_floats4(float* p, const float (&f)[4]) {
  uint32_t w[4];
  for (int k = 0; k < 4; ++k) w[k] = __float_as_uint(f[k]);
  store16(p, w);
}

// 8 bytes at an 8-byte aligned p, in one access.
__device__ inline void store8(void* p, const uint32_t (&w)[2]) {
#ifdef TRAINER_CUDA_EMULATION
  std::memcpy(p, w, 8);
#else
  *static_cast<uint2*>(p) = make_uint2(w[0], w[1]);
#endif
}
__device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace trainer::kernels

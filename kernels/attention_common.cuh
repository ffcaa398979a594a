#pragma once
// What the attention kernels share: where head h of batch b sits in qkv [B,T,3C] and out [B,T,C],
// reading an fp32 or bf16 qkv and `out`, the reference kernels' dot product and block size, and
// the dispatch of a runtime head size to compiled ones.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"

namespace trainer::kernels {

// QkvT: float, or uint16_t for bf16 qkv (bf16 compute), read through load_in (bf16.cuh).
template <int HS, class QkvT = float>
struct AttentionHead {
  const QkvT* qkv;
  int64_t T, C, b, h;
  __device__ const QkvT* q(int64_t t) const { return qkv + (b * T + t) * 3 * C + h * HS; }
  __device__ const QkvT* k(int64_t t) const { return q(t) + C; }
  __device__ const QkvT* v(int64_t t) const { return q(t) + 2 * C; }
  __device__ int64_t o(int64_t t) const { return (b * T + t) * C + h * HS; }
};

// The reference kernels' (attention.cu, context_attention.cu) dot product of two head rows,
// read as fp32 (bf16.cuh's load_in), and their block size for a loop over n keys or elements: a
// multiple of 32 in [64, 256].
template <class A, class B>
__device__ float dot(const A* a, const B* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += load_in(a + i) * load_in(b + i);
  return s;
}

inline int threads_for(int64_t n) {
  const int64_t w = (n + 31) / 32 * 32;
  return static_cast<int>(w < 64 ? 64 : (w > 256 ? 256 : w));
}

// The grid of the flash kernels, one block per `rows` rows of one head: x batch x head (up to
// 2^31 - 1 blocks), y the row tiles (up to 65535).
inline dim3 attention_grid(int64_t B, int64_t T, int64_t NH, int rows) {
  return dim3(static_cast<unsigned>(B * NH), static_cast<unsigned>((T + rows - 1) / rows));
}

template <int... Sizes>
bool head_size_in(int64_t head_size) {
  return ((head_size == Sizes) || ...);
}

// Calls f(std::integral_constant<int, HS>) for head_size among Sizes; throws naming `kernels`
// otherwise.
template <int... Sizes, class F>
void with_head_size(int64_t head_size, const char* kernels, F&& f) {
  const bool found =
      ((head_size == Sizes ? (f(std::integral_constant<int, Sizes>{}), true) : false) || ...);
  if (!found)
    throw std::invalid_argument(std::string(kernels) + ": head size " + std::to_string(head_size) +
                                " is not compiled");
}

}  // namespace trainer::kernels

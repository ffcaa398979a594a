#pragma once
// What the attention kernels share: where head h of batch b sits in qkv [B,T,3C] and out [B,T,C],
// reading an fp32 or bf16 qkv and `out`, the sequence positions of the query rows (QueryRows:
// whole sequences, or a context-parallel rank's chunks), the reference kernels' dot product and
// block size, and the dispatch of a runtime head size to compiled ones.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "runtime/core/attention_state.h"

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

// The query rows of one head, and the sequence position of each: all T in order (plain causal
// attention: position i), or cp rank r's two chunks of L tokens of the sequence's 2cp
// (context_chunk: positions first + i, then second + i - L). Positions increase with the rows, so
// a tile's last row sees the most keys; rows of an aligned group of n are consecutive positions
// when n divides L (the tensor-core kernels' slabs and tiles need it). out, dout, lse and dsum have
// `rows` rows per head; q, k, v and the gradients sit at their positions in the sequence-order qkv
// [B,T,3C].
struct QueryRows {
  int64_t rows = 0;
  int64_t L = 0;  // 0: rows are positions 0..rows-1
  int64_t first = 0, second = 0;
  __device__ int64_t position(int64_t i) const {
    return L == 0 ? i : (i < L ? first + i : second + i - L);
  }
  // The first row whose position is at or after p (rows: none).
  __device__ int64_t first_row_at(int64_t p) const {
    if (L == 0) return p < rows ? p : rows;
    if (p <= first) return 0;
    if (p < first + L) return p - first;
    if (p <= second) return L;
    if (p < second + L) return L + p - second;
    return rows;
  }
  template <int HS, class QkvT>
  __device__ int64_t o(const AttentionHead<HS, QkvT>& hd, int64_t i) const {
    return (hd.b * rows + i) * hd.C + hd.h * HS;
  }
};

inline QueryRows whole_sequence(int64_t T) {
  return QueryRows{T, 0, 0, 0};
}
inline QueryRows context_rows(int64_t rank, int64_t cp, int64_t Tl) {
  const int64_t L = Tl / 2;
  return QueryRows{Tl, L, context_chunk(rank, cp, 0) * L, context_chunk(rank, cp, 1) * L};
}

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

#pragma once
// The mixture of experts' row moves (Backend::moe_*): dispatch of token rows into the experts'
// slots, the weighted combine back, and the combine weights' gradient.
#include <cstdint>

namespace trainer::cpu {

// out[s] = scale[s] * inp[token_of_slot[s]] (scale null: 1), zero where token_of_slot[s] < 0.
template <class T>
void moe_gather_rows(T* out, const T* inp, const int32_t* token_of_slot, const T* scale, int64_t S,
                     int64_t C) {
#pragma omp parallel for
  for (int64_t s = 0; s < S; ++s) {
    T* o = out + s * C;
    const int32_t tok = token_of_slot[s];
    if (tok < 0) {
      for (int64_t c = 0; c < C; ++c) o[c] = T(0);
      continue;
    }
    const T* x = inp + int64_t{tok} * C;
    const T a = scale ? scale[s] : T(1);
    for (int64_t c = 0; c < C; ++c) o[c] = a * x[c];
  }
}

// out[n] += sum_k weight[n,k] * inp[slot[n,k]] over the k with slot[n,k] >= 0 (weight null: 1).
template <class T>
void moe_combine_rows(T* out, const T* inp, const int32_t* slot, const T* weight, int64_t N,
                      int64_t K, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* o = out + n * C;
    for (int64_t k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      if (s < 0) continue;
      const T a = weight ? weight[n * K + k] : T(1);
      const T* y = inp + int64_t{s} * C;
      for (int64_t c = 0; c < C; ++c) o[c] += a * y[c];
    }
  }
}

// dweight[n,k] = dot(dout[n], inp[slot[n,k]]), 0 where slot[n,k] < 0 (overwritten).
template <class T>
void moe_gate_grad(T* dweight, const T* dout, const T* inp, const int32_t* slot, int64_t N,
                   int64_t K, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      T dot = T(0);
      if (s >= 0)
        for (int64_t c = 0; c < C; ++c) dot += dout[n * C + c] * inp[int64_t{s} * C + c];
      dweight[n * K + k] = dot;
    }
  }
}

}  // namespace trainer::cpu

#pragma once
// Fully specified random numbers for data: splitmix64 to derive seeds, xoshiro256** for streams.
// Written out here (not std::mt19937 + <random> distributions, whose results vary by library) so
// synthetic token streams and shuffles are bit-identical everywhere.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "runtime/core/rng.h"

namespace trainer::data {

using trainer::splitmix64_next;  // (runtime/core/rng.h)

// One seed from several words (a base seed, a purpose tag, an index...); order matters.
inline uint64_t derive_seed(std::initializer_list<uint64_t> words) {
  uint64_t state = 0x243F6A8885A308D3ull;
  uint64_t out = 0;
  for (uint64_t w : words) {
    state ^= w;
    out = splitmix64_next(state);
    state = out;
  }
  return out;
}

// xoshiro256** 1.0 (Blackman & Vigna), state filled from splitmix64(seed).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : s_) word = splitmix64_next(seed);
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n) (Lemire's multiply-shift; bias below 2^-64 * n).
  uint64_t below(uint64_t n) { return multiply_high(next_u64(), n); }

  static uint64_t multiply_high(uint64_t a, uint64_t b) {
    __extension__ using u128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<u128>(a) * b) >> 64);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Fisher-Yates: a uniformly random permutation of 0..n-1 drawn from `rng`.
inline std::vector<int64_t> random_permutation(int64_t n, Rng& rng) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

}  // namespace trainer::data

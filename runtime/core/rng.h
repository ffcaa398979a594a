#pragma once
// A small counter-free RNG with a fully specified output (splitmix64), so that initial weights and
// synthetic data are bit-identical on every platform and standard library.
#include <cmath>
#include <cstdint>

namespace trainer {

// One step of splitmix64 (Steele, Lea and Flood): advances `state`, returns the next output.
inline uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64_next(state_); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box-Muller, one value per call; the second is dropped for simplicity).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

// Derives an independent seed from a base seed and a stream id (e.g. a tensor index).
inline uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  SplitMix64 g(seed ^ (stream * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
  return g.next();
}

}  // namespace trainer

#include "runtime/core/sha256_blocks.h"

#include <array>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace trainer::sha256_blocks {
namespace {

alignas(16) constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

void compress_portable(uint32_t state[8], const uint8_t* blocks, size_t n_blocks) {
  for (size_t blk = 0; blk < n_blocks; ++blk, blocks += 64) {
    std::array<uint32_t, 64> w;
    for (size_t i = 0; i < 16; ++i) w[i] = load_be32(blocks + 4 * i);
    for (size_t i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5],
             g = state[6], h = state[7];
    for (size_t i = 0; i < 64; ++i) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                    kRoundConstants[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    state[0] += a, state[1] += b, state[2] += c, state[3] += d;
    state[4] += e, state[5] += f, state[6] += g, state[7] += h;
  }
}

#if defined(__x86_64__)

bool has_sha_extensions() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool sha = (ebx >> 29) & 1u;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool ssse3 = (ecx >> 9) & 1u, sse41 = (ecx >> 19) & 1u;
  return sha && ssse3 && sse41;
}

// The state lives in two registers as (A,B,E,F) and (C,D,G,H), the layout sha256rnds2 wants.
// Each group of four rounds takes four message words: the first four groups load them, the
// others extend the schedule with sha256msg1/msg2 (W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) +
// W[t-16]).
__attribute__((target("sha,sse4.1,ssse3"))) void compress_sha_ni(uint32_t state[8],
                                                                 const uint8_t* blocks,
                                                                 size_t n_blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0]));     // A B C D
  __m128i state1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4]));  // E F G H
  tmp = _mm_shuffle_epi32(tmp, 0xB1);                                             // C D A B
  state1 = _mm_shuffle_epi32(state1, 0x1B);                                       // H G F E
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);                               // A B E F
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);                                    // C D G H
  for (size_t blk = 0; blk < n_blocks; ++blk, blocks += 64) {
    const __m128i abef = state0, cdgh = state1;
    __m128i w[4];  // message words of the last four groups, w[g % 4] = W[4g .. 4g+3]
    for (int g = 0; g < 16; ++g) {
      __m128i& cur = w[g % 4];
      if (g < 4) {
        cur = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * g)),
                               byte_swap);
      } else {
        const __m128i& prev = w[(g + 3) % 4];                   // W[t-4 .. t-1]
        const __m128i& prev2 = w[(g + 2) % 4];                  // W[t-8 .. t-5]
        __m128i x = _mm_sha256msg1_epu32(cur, w[(g + 1) % 4]);  // W[t-16..] + s0(W[t-15..])
        x = _mm_add_epi32(x, _mm_alignr_epi8(prev, prev2, 4));  // + W[t-7 .. t-4]
        cur = _mm_sha256msg2_epu32(x, prev);                    // + s1(W[t-2 ..])
      }
      __m128i msg = _mm_add_epi32(
          cur, _mm_load_si128(reinterpret_cast<const __m128i*>(&kRoundConstants[4 * g])));
      state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
    }
    state0 = _mm_add_epi32(state0, abef);
    state1 = _mm_add_epi32(state1, cdgh);
  }
  tmp = _mm_shuffle_epi32(state0, 0x1B);        // F E B A
  state1 = _mm_shuffle_epi32(state1, 0xB1);     // D C H G
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // D C B A
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // H G F E
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), state1);
}

#else

bool has_sha_extensions() {
  return false;
}
void compress_sha_ni(uint32_t state[8], const uint8_t* blocks, size_t n_blocks) {
  compress_portable(state, blocks, n_blocks);
}

#endif

void compress(uint32_t state[8], const uint8_t* blocks, size_t n_blocks) {
  static const bool sha_ni = has_sha_extensions();
  (sha_ni ? compress_sha_ni : compress_portable)(state, blocks, n_blocks);
}

}  // namespace trainer::sha256_blocks

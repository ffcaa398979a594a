#pragma once
// SHA-256 block compression (FIPS 180-4, section 6.2.2) over whole 64-byte blocks: a portable
// version and one on the x86 SHA extensions (SHA-NI: about 8x faster, which is what makes
// hashing multi-GB checkpoint files cheaper than writing them). sha256_compress() picks the
// fastest one this CPU has, once.
#include <cstddef>
#include <cstdint>

namespace trainer::sha256_blocks {

void compress_portable(uint32_t state[8], const uint8_t* blocks, size_t n_blocks);
// Only callable where has_sha_extensions() is true.
void compress_sha_ni(uint32_t state[8], const uint8_t* blocks, size_t n_blocks);
bool has_sha_extensions();

void compress(uint32_t state[8], const uint8_t* blocks, size_t n_blocks);

}  // namespace trainer::sha256_blocks

#include "runtime/core/sha256.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "runtime/core/sha256_blocks.h"

namespace trainer {
namespace {

constexpr std::array<uint32_t, 8> kInitialState = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

}  // namespace

Sha256::Sha256() : state_(kInitialState) {}

void Sha256::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_bytes_ += n;
  if (buffered_ > 0) {  // complete the partial block first
    const size_t take = std::min(n, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take, p += take, n -= take;
    if (buffered_ < buffer_.size()) return;
    sha256_blocks::compress(state_.data(), buffer_.data(), 1);
    buffered_ = 0;
  }
  const size_t whole = n / 64;  // whole blocks straight from the input, no copy
  sha256_blocks::compress(state_.data(), p, whole);
  p += whole * 64, n -= whole * 64;
  if (n > 0) std::memcpy(buffer_.data(), p, n);
  buffered_ = n;
}

std::string Sha256::final() {
  // Padding: 0x80, zeros up to 56 mod 64, then the message length in bits, big-endian.
  const uint64_t bit_length = total_bytes_ * 8;
  const uint8_t one_bit = 0x80, zero = 0;
  update(&one_bit, 1);
  while (buffered_ != 56) update(&zero, 1);
  uint8_t length_be[8];
  for (int i = 0; i < 8; ++i) length_be[i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
  update(length_be, 8);

  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (uint32_t word : state_)
    for (int shift = 28; shift >= 0; shift -= 4) hex += kHex[(word >> shift) & 0xf];
  return hex;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.final();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
  Sha256 h;
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    h.update(chunk.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error("error reading '" + path + "'");
  return h.final();
}

}  // namespace trainer

#pragma once
// SHA-256 (FIPS 180-4), hand-written because no crypto library is a dependency. Used for the
// config hash and checkpoint file digests; not meant for secrets. The block function (with the
// x86 SHA extensions where the CPU has them) is in sha256_blocks.h.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainer {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes the hash and returns it as 64 lowercase hex digits. The object must not be updated
  // afterwards.
  std::string final();

 private:
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
inline std::string sha256_hex(std::string_view s) {
  return sha256_hex(s.data(), s.size());
}
// Hash of a file's bytes; throws std::runtime_error naming the path when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace trainer

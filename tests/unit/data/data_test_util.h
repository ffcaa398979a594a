#pragma once
// Helpers for the data tests: a scratch directory and raw file writers (independent of the code
// under test, so they can build bad files too).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"

namespace trainer::data::testing {

using trainer::testing::TempDir;

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("test: cannot create " + path);
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);  // (data() may be null)
  std::fclose(f);
}

inline std::vector<unsigned char> read_bytes(const std::string& path) {
  std::vector<unsigned char> bytes(std::filesystem::file_size(path));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("test: cannot open " + path);
  const size_t got = std::fread(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  bytes.resize(got);
  return bytes;
}

inline void append_le32(std::vector<unsigned char>& out, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(u >> (8 * i)));
}

// The bytes of an llm.c shard, built by hand: 256 little-endian int32, then uint16 tokens.
inline std::vector<unsigned char> shard_bytes(int32_t magic, int32_t version, int32_t count,
                                              const std::vector<uint16_t>& tokens) {
  std::vector<unsigned char> out;
  append_le32(out, magic);
  append_le32(out, version);
  append_le32(out, count);
  for (int i = 3; i < 256; ++i) append_le32(out, 0);
  for (uint16_t t : tokens) {
    out.push_back(static_cast<unsigned char>(t & 0xff));
    out.push_back(static_cast<unsigned char>(t >> 8));
  }
  return out;
}

inline void write_raw_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_bytes(path, shard_bytes(20240520, 1, static_cast<int32_t>(tokens.size()), tokens));
}

}  // namespace trainer::data::testing

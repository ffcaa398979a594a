#pragma once
// Helpers for the data tests: a scratch directory and raw file writers (independent of the code
// under test, so they can build bad files too).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::data::testing {

// A fresh directory under $TRAINER_TEST_TMP (or the system temp dir), removed at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const char* base = std::getenv("TRAINER_TEST_TMP");
    std::filesystem::path root = base ? base : std::filesystem::temp_directory_path().string();
    path_ = root / ("unit_data_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("test: cannot create " + path);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
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

#pragma once
// Token shards in llm.c's format: a header of 256 int32 ([0] magic 20240520, [1] version 1,
// [2] token count), then the tokens as uint16. The reader checks the exact file size the header
// implies, as llm.c does, so truncated or padded files are refused.
#include <cstdint>
#include <span>
#include <string>

#include "runtime/data/token_source.h"

namespace trainer::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;  // uint16 tokens
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// One shard file, memory-mapped read-only. Throws DataError (naming the file, what was expected
// and what was found) for a missing file, bad magic, bad version or a size that does not match.
class ShardReader final : public TokenSource {
 public:
  explicit ShardReader(std::string path);
  ~ShardReader() override;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  int64_t size() const override { return count_; }
  void read(int64_t pos, int64_t n, int32_t* out) const override;
  std::string name() const override { return path_; }

  const std::string& path() const { return path_; }
  const uint16_t* tokens() const { return tokens_; }

 private:
  std::string path_;
  int64_t count_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
};

// Writes a shard whole or not at all (AtomicFileWriter: a reader never sees half a file).
void write_shard(const std::string& path, std::span<const uint16_t> tokens);

}  // namespace trainer::data

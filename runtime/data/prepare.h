#pragma once
// `trainer data prepare`: text files -> llm.c token shards with a byte-level tokenizer (each byte
// is a token, vocab 256). The inputs are concatenated in order; the last val_fraction of the
// tokens go to val_NNNNNN.bin, the rest to train_NNNNNN.bin, in as few shards of at most
// max_shard_tokens as possible, whose sizes differ by at most one token (never a small last shard).
#include <cstdint>
#include <string>
#include <vector>

namespace trainer::data {

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string output_dir;
  std::string tokenizer = "byte";
  double val_fraction = 0.1;  // in [0, 1); > 0 gives val at least 2 tokens (one input/target pair)
  int64_t max_shard_tokens = 100'000'000;
};

struct PrepareSummary {
  int64_t vocab_size = 256;
  int64_t total_tokens = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
  std::vector<std::string> removed_stale;  // older shards of ours beyond the ones just written
  std::string describe() const;
};

// Throws config::ConfigError for bad input (missing input file, unknown tokenizer, val_fraction
// outside [0, 1), too few tokens) and std::runtime_error when writing fails.
PrepareSummary prepare_data(const PrepareOptions& options);

}  // namespace trainer::data

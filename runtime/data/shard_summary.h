#pragma once
// What a checkpoint records of the train data it was reading: each shard's file name and token
// count, in the loader's order. Its loader position (shard index, token offset, pass) means
// something only over the same shards: a glob that matches one more file sorted in before the
// saved shard, or a shard rewritten, would have the resume read other tokens without a word.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/data/loader.h"

namespace trainer::data {

struct ShardSummary {
  std::string name;  // the file name, without its directory (a copy elsewhere is the same data)
  int64_t tokens = 0;
  bool operator==(const ShardSummary&) const = default;
};

// The loader's shards (none for a synthetic stream).
std::vector<ShardSummary> shard_summaries(const DataLoader& loader);

// sha256 hex of what a loader's token shards hold, as far as a cheap look tells: each file's name
// (without its directory), token count, and first and last 256 tokens (two datasets or two
// tokenizations with the same file names and sizes differ there). None for a synthetic stream.
std::optional<std::string> shards_fingerprint(const DataLoader& loader);

// One line per shard, "<tokens> <name>", and back: a list sent from one rank to the others.
std::string shard_list_text(const std::vector<ShardSummary>& shards);
std::vector<ShardSummary> shard_list_from_text(const std::string& text);

// The first shard in which `mine` and `theirs` differ ("" when none), e.g. "shard 4 is
// train_3.bin (1000 tokens) on rank 1, none on rank 0" (`mine_name`, `theirs_name`).
std::string first_shard_difference(const std::vector<ShardSummary>& mine,
                                   const std::string& mine_name,
                                   const std::vector<ShardSummary>& theirs,
                                   const std::string& theirs_name);

// Why data of the shards `now` cannot continue from `at`, saved reading `saved`; "" when it can.
// Without shuffle the shards up to the one `at` reads must be the same (shards added after it are
// read later); with shuffle every pass's order depends on all of them, so all must be. `saved`
// empty: a synthetic stream, or a checkpoint from before the list was kept (nothing to compare).
// Where known: `synthetic_then`, whether the checkpoint read a synthetic stream (its position is
// no place in token shards); `shuffled_then`, which must be `shuffled` (a shuffled position is a
// sample of a permutation, an unshuffled one a token offset).
std::string shard_list_difference(const std::vector<ShardSummary>& saved,
                                  const std::vector<ShardSummary>& now, const LoaderState& at,
                                  bool shuffled, std::optional<bool> shuffled_then = {},
                                  std::optional<bool> synthetic_then = {});

}  // namespace trainer::data

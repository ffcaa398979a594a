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

// Why data of the shards `now` cannot continue from `at`, saved reading `saved`; "" when it can.
// Without shuffle the shards up to the one `at` reads must be the same (shards added after it are
// read later); with shuffle every pass's order depends on all of them, so all must be. `saved`
// empty (a synthetic stream, or a checkpoint from before the list was kept): nothing to compare.
// `shuffled_then`, where recorded, must be `shuffled`: a shuffled position is a sample of a
// permutation, an unshuffled one a token offset.
std::string shard_list_difference(const std::vector<ShardSummary>& saved,
                                  const std::vector<ShardSummary>& now, const LoaderState& at,
                                  bool shuffled, std::optional<bool> shuffled_then = {});

}  // namespace trainer::data

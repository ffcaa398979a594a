#include "runtime/train/data_agreement.h"

#include "runtime/data/shard_summary.h"
#include "runtime/train/rank_agreement.h"

namespace trainer::train {

void check_every_rank_reads_the_same_shards(dist::Comm* world, int rank,
                                            const config::RunConfig& cfg,
                                            const data::DataLoader& train) {
  if (world == nullptr || world->size() == 1) return;
  const std::vector<data::ShardSummary> mine = data::shard_summaries(train);
  std::string rank0 = data::shard_list_text(mine);
  from_rank0(world, rank0);
  const auto [differing, difference] = first_rank_saying(
      world, rank,
      data::first_shard_difference(mine, "on rank " + std::to_string(rank),
                                   data::shard_list_from_text(rank0), "on rank 0"));
  if (differing < 0) return;
  throw config::ConfigError(
      "config: data.train = \"" + cfg.data.train + "\": rank " + std::to_string(differing) +
      " sees other shards than rank 0: " + difference +
      ". Every rank reads its part of one stream, so every rank must see the same shards (a "
      "node-local copy the same as the others; a relative path is taken from each process's "
      "working directory)");
}

}  // namespace trainer::train

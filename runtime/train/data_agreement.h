#pragma once
// Every rank reads its part of one train stream (data/loader.h): each rank's own view of
// data.train must list the same shards, in the same order. Ranks on other nodes read node-local
// copies, or a relative path from other working directories; one stale copy, a shard more or
// less, and the ranks read tokens of different streams at the same step, or one starts a new
// pass while another reads on, without a word.
#include "runtime/config/run_config.h"
#include "runtime/data/loader.h"
#include "runtime/dist/comm.h"

namespace trainer::train {

// Throws config::ConfigError on every rank (exit 2) naming the lowest rank whose shards differ
// from rank 0's, and the first difference. `world` null or of one rank: nothing to check.
void check_every_rank_reads_the_same_shards(dist::Comm* world, int rank,
                                            const config::RunConfig& cfg,
                                            const data::DataLoader& train);

}  // namespace trainer::train

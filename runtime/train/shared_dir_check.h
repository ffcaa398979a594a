#pragma once
// Every rank writes its part of each checkpoint into checkpoint.dir, and rank 0 commits a
// checkpoint only when it sees every rank's file there. A directory that is not one directory for
// all ranks (a node-local disk, a relative path from other working directories) would fail the
// first save, after the hours of training before it. So at the start rank 0 creates a file of a
// fresh name there and every rank looks for it.
#include <chrono>
#include <string>

#include "runtime/dist/comm.h"

namespace trainer::train {

// Throws config::ConfigError on every rank (exit 2) naming `key`, `dir` and the ranks that do not
// see rank 0's file within `patience` (a network filesystem's cached lookups), or rank 0's reason
// it cannot create one. `world` null or of one rank: nothing to check.
void check_every_rank_sees(dist::Comm* world, int rank, const std::string& key,
                           const std::string& dir, std::chrono::milliseconds patience);

}  // namespace trainer::train

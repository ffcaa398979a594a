#pragma once
// Every process of a run must train the same config on the same world. Ranks started by hand, or
// by launchers given other arguments on other nodes, that differ would train wrong without a
// word (another train.lr lets the replicas drift apart, another micro_batch trains fewer
// sequences than the report says) or fail later in collectives that do not match (another
// n_layer, WORLD_SIZE or train.steps). So, right after the rendezvous and before any data or
// collective: each rank publishes in the store its config's hash and YAML, its WORLD_SIZE and
// where it runs (host, pid); rank 0 compares every rank's with its own and publishes a verdict
// that every rank reads. A difference is bad input: a config::ConfigError (exit 2) on every rank,
// naming the rank, where it runs and the keys that differ. A second process with a RANK already
// taken is refused the same way (DuplicateRank: it must not report a failure into the store of
// the run it is not part of). What a rank refuses on its own before the rendezvous (its config
// file, its output directory) ends that rank alone; the others then find it missing here after
// distributed.timeout_s.
#include <string>

#include "runtime/config/run_config.h"
#include "runtime/dist/store.h"

namespace trainer::train {

struct DuplicateRank : config::ConfigError {
  using config::ConfigError::ConfigError;
};

void agree_on_the_run(dist::Store& store, int rank, int world_size, const config::RunConfig& cfg);

// rank 0's side, for tests: the first difference between rank 0's run and another rank's, or ""
// when they agree. world_size and config_yaml are the other rank's; `where` names it.
std::string run_difference(const config::RunConfig& rank0_cfg, int rank0_world, int rank,
                           int world_size, const std::string& config_yaml,
                           const std::string& where);

}  // namespace trainer::train

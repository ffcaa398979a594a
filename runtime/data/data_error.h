#pragma once
// DataError: a data source the user named cannot be used (missing file, bad shard header, token out
// of the vocabulary, unknown source spec). It is bad input, so it is a config::ConfigError and the
// CLI exits with status 2. Messages name the file, what was expected and what was found.
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::data {

struct DataError : config::ConfigError {
  using config::ConfigError::ConfigError;
};

}  // namespace trainer::data

#pragma once
// report.json's "config": the run's resolved config, every key (in the config table's order,
// nested by its dotted path) with its value, so that a report says on its own what ran and
// `trainer compare` can say in which keys runs differ.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::report {

nlohmann::ordered_json config_json(const config::RunConfig& cfg);

// A report's "config" back as dotted key -> value text ("0.003", "cosine", "null", "auto"); empty
// for a report without one (written before reports carried it).
std::map<std::string, std::string> flat_config(const nlohmann::json& report);

}  // namespace trainer::report

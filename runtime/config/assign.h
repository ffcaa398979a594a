#pragma once
// Setting one field from a YAML node, with type errors that name the key, the value and the
// expected type.
#include <yaml-cpp/yaml.h>

#include <string>

#include "runtime/config/run_config.h"
#include "runtime/config/schema.h"

namespace trainer::config {

// The node as it reads in an error message: "abc" (quoted scalar), null, <mapping>, <sequence>.
std::string describe_node(const YAML::Node& node);

// Converts `node` to the field's type and stores it. Enumerations and ranges are checked later
// (check_field), once every source has been applied.
void assign_field(RunConfig& cfg, const Field& field, const YAML::Node& node);

}  // namespace trainer::config

#pragma once
// One field's current value as canonical YAML text, and the check of that value against the
// field's enumeration and range.
#include <cstdint>
#include <string>
#include <variant>

#include "runtime/config/run_config.h"
#include "runtime/config/schema.h"

namespace trainer::config {

// Throws ConfigError("config: " + message).
[[noreturn]] void fail(const std::string& message);
// The same, about `key`'s value (ConfigError::key).
[[noreturn]] void fail_key(const std::string& key, const std::string& message);

// Shortest text that reads back to the same double; always has a '.' or an exponent ("25.0").
std::string format_number(double v);
// YAML double-quoted string with escapes.
std::string quote(const std::string& s);

// The value as it appears in the canonical dump: quoted strings, `auto` / `null` for the
// special zero / empty values.
std::string field_text(const RunConfig& cfg, const Field& field);

// The value as a plain scalar (what a JSON copy of the config holds): monostate for `null`, the
// string "auto" for `auto`, else the field's own type.
using FieldScalar = std::variant<std::monostate, int64_t, uint64_t, double, bool, std::string>;
FieldScalar field_scalar(const RunConfig& cfg, const Field& field);

// Throws ConfigError naming the key, the value and what is allowed when the value is not one of
// the field's choices or outside its range.
void check_field(const RunConfig& cfg, const Field& field);
void check_fields(const RunConfig& cfg);

}  // namespace trainer::config

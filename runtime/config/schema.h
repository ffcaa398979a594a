#pragma once
// The table of every config key: its dotted path, the RunConfig field it maps to, and what values
// it allows. Parsing, --set overrides, validation of ranges and the canonical dump all walk this
// one table, so a new key is one new row.
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "runtime/config/run_config.h"

namespace trainer::config {

// Accessors from a config to one of its fields, one pointer type per field type.
using IntField = int& (*)(RunConfig&);
using U64Field = uint64_t& (*)(RunConfig&);
using DoubleField = double& (*)(RunConfig&);
using BoolField = bool& (*)(RunConfig&);
using StringField = std::string& (*)(RunConfig&);
using FieldRef = std::variant<IntField, U64Field, DoubleField, BoolField, StringField>;

// A spelled-out value standing for a field's zero / empty state, or (null_is_infinite: a number
// with no bound, such as an expert's capacity factor) for +infinity, which YAML's numbers the
// config takes cannot spell.
enum class Special { none, auto_is_zero, null_is_empty, null_is_infinite };

// Allowed numeric interval; open ends exclude the bound.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  bool contains(double v) const;
  std::string describe() const;  // e.g. "> 0", ">= 1", "in [0, 1)"
};

struct Field {
  std::string key;  // "train.lr"
  FieldRef ref;
  std::vector<std::string> choices = {};  // non-empty: an enumeration
  Range range = {};
  Special special = Special::none;
};

// Every key, in canonical order (DESIGN.md "Run config"; sections contiguous).
const std::vector<Field>& config_fields();
// The field with this dotted path, or nullptr.
const Field* find_field(const std::string& key);
// True for "", "train", "model.moe", ...: a prefix that holds keys.
bool is_section(const std::string& path);
// Direct child names of a section ("train" -> {"micro_batch", ...}; "" -> top-level sections).
std::vector<std::string> section_children(const std::string& section);

}  // namespace trainer::config

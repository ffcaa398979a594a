// to_yaml is canonical: parse(to_yaml(c)) == c for every key, and the hash follows the text.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/config/field_value.h"
#include "runtime/config/run_config.h"
#include "runtime/config/schema.h"
#include "runtime/core/sha256.h"

using namespace trainer::config;

namespace {

// A value for `field` different from its default, as --set text.
std::string other_value(const Field& field, const RunConfig& defaults) {
  if (!field.choices.empty()) {
    for (const std::string& c : field.choices)
      if ("\"" + c + "\"" != field_text(defaults, field) && c != field_text(defaults, field))
        return c;
    return field.choices.front();  // a single choice: nothing else is allowed
  }
  return std::visit(
      [&](auto ref) -> std::string {
        using T = std::remove_reference_t<decltype(ref(std::declval<RunConfig&>()))>;
        if constexpr (std::is_same_v<T, bool>)
          return field_text(defaults, field) == "true" ? "false" : "true";
        if constexpr (std::is_same_v<T, std::string>)
          return "\"a path: with 'quotes' \\\" and \\\\\"";
        // Doubles that print with 17 digits (0.1 + 0.2), inside the key's range.
        if constexpr (std::is_same_v<T, double>)
          return field.range.contains(0.30000000000000004) ? "0.30000000000000004"
                                                           : "3.3000000000000003";
        return "77";
      },
      field.ref);
}

// Exact equality of one field's value in two configs.
bool same_value(RunConfig& a, RunConfig& b, const Field& field) {
  return std::visit([&](auto ref) { return ref(a) == ref(b); }, field.ref);
}

}  // namespace

TEST_CASE("to_yaml_round_trips_the_defaults", "[config]") {
  const RunConfig c;
  const std::string text = to_yaml(c);
  CHECK(to_yaml(parse_config(text)) == text);
}

TEST_CASE("to_yaml_round_trips_a_change_to_every_key", "[config]") {
  const RunConfig defaults;
  for (const Field& f : config_fields()) {
    RunConfig changed = parse_config("", {f.key + "=" + other_value(f, defaults)});
    const std::string text = to_yaml(changed);
    INFO("key " << f.key << " = " << field_text(changed, f) << "\n" << text);
    if (f.choices.size() != 1) CHECK(text != to_yaml(defaults));
    RunConfig reparsed = parse_config(text);
    CHECK(field_text(reparsed, f) == field_text(changed, f));
    CHECK(same_value(reparsed, changed, f));  // the value itself, not only its text
    CHECK(to_yaml(reparsed) == text);
  }
}

TEST_CASE("to_yaml_round_trips_the_spelled_out_specials", "[config]") {
  // auto (dp, peak_tflops), null (paths; an expert's capacity factor: no capacity, dropless)
  for (const char* set : {"parallel.dp=auto", "hardware.peak_tflops=auto", "checkpoint.dir=null",
                          "model.moe.capacity_factor=null"}) {
    INFO(set);
    const RunConfig c = parse_config("", {set});
    const std::string text = to_yaml(c);
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    const Field& f = *std::find_if(config_fields().begin(), config_fields().end(),
                                   [&](const Field& x) { return x.key == key; });
    CHECK(field_text(c, f) == std::string(set).substr(key.size() + 1));
    CHECK(to_yaml(parse_config(text)) == text);
  }
  CHECK(std::isinf(parse_config("model: {moe: {capacity_factor: ~}}").model.moe.capacity_factor));
}

TEST_CASE("to_yaml_lists_every_key_once_in_table_order", "[config]") {
  const std::string text = to_yaml(RunConfig{});
  size_t last = 0;
  for (const Field& f : config_fields()) {
    const std::string leaf = f.key.substr(f.key.rfind('.') + 1) + ": ";
    const size_t at = text.find(leaf, last);
    INFO(f.key << " after offset " << last << " in\n" << text);
    REQUIRE(at != std::string::npos);
    last = at;
  }
}

TEST_CASE("config_sha256_is_the_hash_of_to_yaml_and_tracks_changes", "[config]") {
  const RunConfig a;
  CHECK(config_sha256(a) == trainer::sha256_hex(to_yaml(a)));
  CHECK(config_sha256(parse_config(to_yaml(a))) == config_sha256(a));
  const RunConfig b = parse_config("", {"train.lr=1e-3"});
  CHECK(config_sha256(b) != config_sha256(a));
}

TEST_CASE("to_yaml_keeps_doubles_bit_exact", "[config]") {
  for (double v : {0.1 + 0.2, 1.0 / 3.0, 1e-8, 3.0e-3, 6.02214076e23, 4.9e-324}) {
    RunConfig c;
    c.train.lr = v;
    const double back = parse_config(to_yaml(c)).train.lr;
    INFO("lr " << format_number(v) << " read back as " << format_number(back));
    CHECK(back == v);
  }
}

// What a resume records as changed (run.resumes): the settings that change the run's steps or its
// evals' losses, not its bookkeeping (directories, logging, checkpoints, collectives, eval
// cadence, where it stops).
TEST_CASE("training_changes_leave_out_bookkeeping_settings", "[config]") {
  const RunConfig before = parse_config(embedded_default_yaml());
  const RunConfig after =
      parse_config(embedded_default_yaml(),
                   {"train.lr=1e-3", "train.eval_batches=4", "run.out_dir=elsewhere",
                    "logging.every_steps=1", "checkpoint.every_steps=5", "train.stop_after_steps=9",
                    "train.eval_every=7", "parallel.bucket_mb=5", "hardware.peak_tflops=1",
                    "distributed.timeout_s=60", "train.spike_factor=4"});
  CHECK(config_changes(before, after).size() == 11);
  CHECK(training_changes(before, after) ==
        std::vector<std::string>{"train.lr: 0.003 -> 0.001", "train.eval_batches: 8 -> 4"});
}

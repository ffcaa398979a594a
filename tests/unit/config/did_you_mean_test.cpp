// Edit distance and the typo suggestion behind "did you mean".
#include "runtime/config/did_you_mean.h"

#include <catch2/catch.hpp>

using namespace trainer::config;

TEST_CASE("edit_distance_counts_insertions_deletions_substitutions", "[config]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);  // the textbook example
  CHECK(edit_distance("lrr", "lr") == 1);
  CHECK(edit_distance("n_layers", "n_layer") == 1);
  CHECK(edit_distance("flaw", "lawn") == edit_distance("lawn", "flaw"));
}

TEST_CASE("closest_match_suggests_only_plausible_typos", "[config]") {
  const std::vector<std::string> keys = {"micro_batch", "grad_accum", "lr", "min_lr_ratio"};
  CHECK(closest_match("microbatch", keys) == std::optional<std::string>("micro_batch"));
  CHECK(closest_match("lrr", keys) == std::optional<std::string>("lr"));
  CHECK(closest_match("grad_acum", keys) == std::optional<std::string>("grad_accum"));
  CHECK_FALSE(closest_match("completely_different", keys).has_value());
  CHECK_FALSE(closest_match("x", {}).has_value());
}

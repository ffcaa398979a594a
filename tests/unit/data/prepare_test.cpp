#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "runtime/config/run_config.h"
#include "runtime/data/prepare.h"
#include "tests/unit/data/data_test_util.h"

using namespace trainer::data;
using namespace trainer::data::testing;
using Catch::Matchers::Contains;
using trainer::config::ConfigError;

namespace {

std::vector<unsigned char> text_bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

// The shard bytes of a piece of text under the byte tokenizer.
std::vector<unsigned char> expected_shard(const std::string& text) {
  std::vector<uint16_t> tokens;
  for (unsigned char c : text) tokens.push_back(c);
  return shard_bytes(20240520, 1, static_cast<int32_t>(tokens.size()), tokens);
}

}  // namespace

TEST_CASE("prepare_writes_train_and_val_shards_of_the_concatenated_bytes", "[data][prepare]") {
  TempDir dir("prepare");
  const std::string a = "hello, world\n", b = "\xff\x01 second file: 40 bytes of text.....\n";
  write_bytes(dir.file("a.txt"), text_bytes(a));
  write_bytes(dir.file("b.txt"), text_bytes(b));
  const std::string all = a + b;
  const double fraction = 0.25;
  const auto val_count = static_cast<size_t>(std::llround(all.size() * fraction));

  const auto summary = prepare_data({.inputs = {dir.file("a.txt"), dir.file("b.txt")},
                                     .output_dir = dir.file("out"),
                                     .val_fraction = fraction});
  CHECK(summary.total_tokens == static_cast<int64_t>(all.size()));
  CHECK(summary.val_tokens == static_cast<int64_t>(val_count));
  REQUIRE(summary.train_shards == std::vector<std::string>{dir.file("out/train_000000.bin")});
  REQUIRE(summary.val_shards == std::vector<std::string>{dir.file("out/val_000000.bin")});
  CHECK(read_bytes(dir.file("out/train_000000.bin")) ==
        expected_shard(all.substr(0, all.size() - val_count)));
  CHECK(read_bytes(dir.file("out/val_000000.bin")) ==
        expected_shard(all.substr(all.size() - val_count)));
  CHECK_THAT(summary.describe(), Contains("train_000000.bin") && Contains("vocab 256"));
}

TEST_CASE("prepare_splits_large_inputs_into_shards_and_removes_stale_ones", "[data][prepare]") {
  TempDir dir("prepare_shards");
  std::string text;
  for (int i = 0; i < 23; ++i) text += static_cast<char>('a' + i);
  write_bytes(dir.file("in.txt"), text_bytes(text));
  std::filesystem::create_directories(dir.file("out"));
  write_bytes(dir.file("out/train_000009.bin"), {});  // not contiguous: left alone
  const PrepareOptions options{.inputs = {dir.file("in.txt")},
                               .output_dir = dir.file("out"),
                               .val_fraction = 0,
                               .max_shard_tokens = 10};
  auto summary = prepare_data(options);
  // 23 tokens in shards of at most 10: three of 8, 8 and 7 (not 10, 10 and a short 3).
  REQUIRE(summary.train_shards.size() == 3);
  CHECK(summary.val_shards.empty());
  CHECK(read_bytes(summary.train_shards[0]) == expected_shard(text.substr(0, 8)));
  CHECK(read_bytes(summary.train_shards[1]) == expected_shard(text.substr(8, 8)));
  CHECK(read_bytes(summary.train_shards[2]) == expected_shard(text.substr(16)));

  auto smaller = options;
  smaller.max_shard_tokens = 20;
  summary = prepare_data(smaller);
  CHECK(summary.train_shards.size() == 2);
  CHECK(summary.removed_stale == std::vector<std::string>{dir.file("out/train_000002.bin")});
  CHECK_FALSE(std::filesystem::exists(dir.file("out/train_000002.bin")));
}

// 91 tokens in shards of at most 10: ten shards of 10 or 9 tokens (equal sizes rounded up would
// leave nine of 10 and a last one of a single token, too small for any global batch).
TEST_CASE("prepare_shard_sizes_differ_by_at_most_one_token", "[data][prepare]") {
  TempDir dir("prepare_sizes");
  write_bytes(dir.file("in.txt"), std::vector<unsigned char>(91, 'x'));
  const auto summary = prepare_data({.inputs = {dir.file("in.txt")},
                                     .output_dir = dir.file("out"),
                                     .val_fraction = 0,
                                     .max_shard_tokens = 10});
  REQUIRE(summary.train_shards.size() == 10);
  for (const auto& shard : summary.train_shards) {
    const size_t tokens = (read_bytes(shard).size() - 1024) / 2;
    INFO(shard);
    CHECK((tokens == 9 || tokens == 10));
  }
}

TEST_CASE("prepare_rejects_bad_input_with_config_errors", "[data][prepare]") {
  TempDir dir("prepare_bad");
  write_bytes(dir.file("in.txt"), text_bytes("some text for the test"));
  PrepareOptions o{.inputs = {dir.file("in.txt")}, .output_dir = dir.file("out")};

  auto missing = o;
  missing.inputs.push_back(dir.file("missing.txt"));
  CHECK_THROWS_AS(prepare_data(missing), ConfigError);
  CHECK_THROWS_WITH(prepare_data(missing), Contains(dir.file("missing.txt")));

  auto tokenizer = o;
  tokenizer.tokenizer = "gpt2";
  CHECK_THROWS_WITH(prepare_data(tokenizer), Contains("gpt2") && Contains("byte"));

  for (double bad : {1.0, -0.1, 1.5}) {
    auto fraction = o;
    fraction.val_fraction = bad;
    INFO("val_fraction " << bad);
    CHECK_THROWS_AS(prepare_data(fraction), ConfigError);
    CHECK_THROWS_WITH(prepare_data(fraction), Contains("val-fraction"));
  }

  auto a_dir = o;
  a_dir.inputs = {dir.file("")};
  CHECK_THROWS_WITH(prepare_data(a_dir), Contains("is a directory"));
  // "some text for the test": 22 tokens, every one of them val's at a fraction just under 1.
  auto all_val = o;
  all_val.val_fraction = 0.9999999999999999;
  CHECK_THROWS_WITH(prepare_data(all_val),
                    Contains("the inputs hold 22 tokens; --val-fraction 0.9999999999999999 takes "
                             "22 of them for val (at least 2), which leaves 0 for train; train "
                             "needs at least 2"));
  auto one_token = o;
  write_bytes(dir.file("one.txt"), text_bytes("x"));
  one_token.inputs = {dir.file("one.txt")};
  one_token.val_fraction = 0;
  CHECK_THROWS_WITH(prepare_data(one_token),
                    Contains("the inputs hold 1 tokens; train needs at least 2"));
  auto empty = o;
  write_bytes(dir.file("empty.txt"), {});
  empty.inputs = {dir.file("empty.txt")};
  empty.val_fraction = 0.1;  // (shown as given, with no val share of nothing)
  CHECK_THROWS_WITH(prepare_data(empty),
                    Contains("the inputs hold 0 tokens (every input is empty); train needs"));
  auto a_pipe = o;  // (bash's <(...)): exists, but prepare sizes its inputs before reading them
  a_pipe.inputs = {dir.file("pipe")};
  REQUIRE(::mkfifo(a_pipe.inputs[0].c_str(), 0600) == 0);
  CHECK_THROWS_WITH(prepare_data(a_pipe),
                    Contains("--input " + a_pipe.inputs[0] + ": is not a regular file (a pipe"));
  auto just_above = o;
  just_above.val_fraction = 1.0000001;
  CHECK_THROWS_WITH(prepare_data(just_above), Contains("--val-fraction 1.0000001"));

  auto under_a_file = o;
  under_a_file.output_dir = dir.file("in.txt/out");  // in.txt is a file
  CHECK_THROWS_AS(prepare_data(under_a_file), ConfigError);
  CHECK_THROWS_WITH(prepare_data(under_a_file),
                    Contains("--output") && Contains("not a directory"));

  write_bytes(dir.file("tiny.txt"), text_bytes("ab"));
  auto tiny = o;
  tiny.inputs = {dir.file("tiny.txt")};
  CHECK_THROWS_WITH(prepare_data(tiny), Contains("at least 2"));
  CHECK_FALSE(std::filesystem::exists(dir.file("out")));
}

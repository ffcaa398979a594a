#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime/data/data_error.h"
#include "runtime/data/shard_file.h"
#include "tests/unit/data/data_test_util.h"

using namespace trainer::data;
using namespace trainer::data::testing;
using Catch::Matchers::Contains;

TEST_CASE("shard_round_trip_keeps_tokens_and_writes_llmc_header", "[data][shard]") {
  TempDir dir("roundtrip");
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<uint16_t>((i * 7919) % 65536));
  tokens.push_back(65535);
  const std::string path = dir.file("a.bin");
  write_shard(path, tokens);

  // The file is byte for byte what an llm.c writer produces.
  const auto expected = shard_bytes(20240520, 1, static_cast<int32_t>(tokens.size()), tokens);
  CHECK(read_bytes(path) == expected);

  ShardReader reader(path);
  REQUIRE(reader.size() == static_cast<int64_t>(tokens.size()));
  std::vector<int32_t> got(tokens.size());
  reader.read(0, reader.size(), got.data());
  for (size_t i = 0; i < tokens.size(); ++i) {
    INFO("position " << i);
    REQUIRE(got[i] == tokens[i]);
  }
}

TEST_CASE("shard_reader_reads_a_hand_built_file_and_an_empty_one", "[data][shard]") {
  TempDir dir("handbuilt");
  write_raw_shard(dir.file("x.bin"), {3, 1, 4, 1, 5});
  ShardReader reader(dir.file("x.bin"));
  std::vector<int32_t> got(3);
  reader.read(1, 3, got.data());
  CHECK(got == std::vector<int32_t>{1, 4, 1});

  write_raw_shard(dir.file("empty.bin"), {});
  CHECK(ShardReader(dir.file("empty.bin")).size() == 0);
}

TEST_CASE("shard_with_bad_magic_is_an_error_naming_file_expected_and_found", "[data][shard]") {
  TempDir dir("badmagic");
  const std::string path = dir.file("bad_magic.bin");
  write_bytes(path, shard_bytes(12345, 1, 2, {1, 2}));
  CHECK_THROWS_AS(ShardReader(path), DataError);
  CHECK_THROWS_WITH(ShardReader(path), Contains(path) && Contains("magic") &&
                                           Contains("20240520") && Contains("12345"));
}

TEST_CASE("shard_with_bad_version_is_an_error_naming_file_expected_and_found", "[data][shard]") {
  TempDir dir("badversion");
  const std::string path = dir.file("bad_version.bin");
  write_bytes(path, shard_bytes(20240520, 7, 2, {1, 2}));
  CHECK_THROWS_WITH(ShardReader(path), Contains(path) && Contains("version") &&
                                           Contains("expected 1") && Contains("found 7"));
}

TEST_CASE("truncated_or_padded_shard_is_an_error_with_expected_and_found_size", "[data][shard]") {
  TempDir dir("size");
  const std::string truncated = dir.file("truncated.bin");
  write_bytes(truncated, shard_bytes(20240520, 1, 10, std::vector<uint16_t>(9, 1)));
  CHECK_THROWS_WITH(ShardReader(truncated), Contains(truncated) && Contains("truncated") &&
                                                Contains("1042 bytes") &&
                                                Contains("expected 1044"));

  const std::string padded = dir.file("padded.bin");
  write_bytes(padded, shard_bytes(20240520, 1, 10, std::vector<uint16_t>(11, 1)));
  CHECK_THROWS_WITH(ShardReader(padded), Contains(padded) && Contains("extra bytes") &&
                                             Contains("1046 bytes") && Contains("expected 1044"));

  const std::string header_only_part = dir.file("short_header.bin");
  write_bytes(header_only_part, std::vector<unsigned char>(100, 0));
  CHECK_THROWS_WITH(ShardReader(header_only_part),
                    Contains(header_only_part) && Contains("100 bytes"));
}

TEST_CASE("a_named_pipe_as_a_shard_is_refused_without_waiting_for_a_writer", "[data][shard]") {
  TempDir dir("fifo");
  const std::string path = dir.file("pipe.bin");
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  // A reader's plain open() of a pipe waits for a writer. If ShardReader's does, this thread
  // becomes the writer after 5 s (so the test ends either way) and says it had to.
  std::atomic<bool> returned{false}, had_to_write{false};
  std::thread writer([&] {
    for (int i = 0; i < 100 && !returned; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    while (!returned) {
      had_to_write = true;
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // fails while no reader waits
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  CHECK_THROWS_WITH(ShardReader(path), Contains(path) && Contains("not a regular file"));
  returned = true;
  writer.join();
  CHECK_FALSE(had_to_write);
}

TEST_CASE("missing_shard_is_an_error_naming_the_file", "[data][shard]") {
  TempDir dir("missing");
  const std::string path = dir.file("nope.bin");
  CHECK_THROWS_WITH(ShardReader(path), Contains(path) && Contains("cannot open"));
}

TEST_CASE("a_shard_truncated_under_a_reader_fails_the_read_naming_the_file", "[data][shard]") {
  // `cp new.bin shard.bin` over a running job's data truncates the mapped file: a read of the
  // lost pages raised SIGBUS and the rank died without a word.
  TempDir dir("truncated_under_reader");
  const std::string path = dir.file("live.bin");
  write_shard(path, std::vector<uint16_t>(100000, 7));
  ShardReader reader(path);
  std::vector<int32_t> got(64);
  reader.read(50000, 64, got.data());
  CHECK(got[63] == 7);
  REQUIRE(::truncate(path.c_str(), kShardHeaderBytes + 20) == 0);
  CHECK_THROWS_AS(reader.read(50000, 64, got.data()), DataError);
  CHECK_THROWS_WITH(reader.read(50000, 64, got.data()),
                    Contains(path) && Contains("lost its tokens [50000, 50064)") &&
                        Contains("truncated or overwritten in place"));
  reader.read(0, 10, got.data());  // what is still there reads on
  CHECK(got[9] == 7);
}

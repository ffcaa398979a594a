// SHA-256 against the FIPS 180-2 / NIST example vectors, and incremental == one-shot.
#include "runtime/core/sha256.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/sha256_blocks.h"

using trainer::Sha256;
using trainer::sha256_hex;
namespace sha256_blocks = trainer::sha256_blocks;

TEST_CASE("sha256_matches_nist_vectors", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256_of_a_million_a_fed_in_pieces_matches_nist", "[sha256]") {
  Sha256 h;
  const std::string piece(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(piece);
  CHECK(h.final() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256_incremental_equals_one_shot_at_every_split", "[sha256]") {
  // Lengths around the 55/56/64-byte padding edges, split at every position.
  for (size_t len : {0u, 1u, 55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u, 200u}) {
    std::string msg(len, '\0');
    for (size_t i = 0; i < len; ++i) msg[i] = static_cast<char>((i * 131 + 7) & 0xff);
    const std::string expected = sha256_hex(msg);
    for (size_t cut = 0; cut <= len; ++cut) {
      Sha256 h;
      h.update(msg.data(), cut);
      h.update(msg.data() + cut, len - cut);
      INFO("len " << len << " cut " << cut);
      REQUIRE(h.final() == expected);
    }
  }
}

TEST_CASE("sha256_file_equals_hash_of_its_bytes", "[sha256]") {
  const auto path = std::filesystem::temp_directory_path() / "trainer_sha256_test.bin";
  std::string bytes(3 << 20, '\0');  // several read chunks
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 2654435761u >> 24);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  CHECK(trainer::sha256_file(path.string()) == sha256_hex(bytes));
  std::filesystem::remove(path);
}

TEST_CASE("sha256_file_names_a_missing_path", "[sha256]") {
  REQUIRE_THROWS_WITH(trainer::sha256_file("/nonexistent/trainer.bin"),
                      Catch::Contains("/nonexistent/trainer.bin"));
}

TEST_CASE("sha256_sha_extensions_equal_the_portable_blocks", "[sha256]") {
  if (!sha256_blocks::has_sha_extensions()) {
    WARN("SKIPPED: this CPU has no SHA extensions; only the portable block function runs");
    return;
  }
  std::mt19937 rng(5);
  std::vector<uint8_t> data(64 * 300);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t blocks : {size_t{1}, size_t{2}, size_t{7}, size_t{300}}) {
    uint32_t portable[8] = {1, 2, 3, 4, 5, 6, 7, 0xffffffffu};  // any state, not just the IV
    uint32_t sha_ni[8];
    std::copy(portable, portable + 8, sha_ni);
    sha256_blocks::compress_portable(portable, data.data(), blocks);
    sha256_blocks::compress_sha_ni(sha_ni, data.data(), blocks);
    INFO(blocks << " blocks");
    CHECK(std::equal(portable, portable + 8, sha_ni));
  }
}

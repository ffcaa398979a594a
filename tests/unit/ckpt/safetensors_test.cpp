#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

#include "runtime/ckpt/safetensors.h"
#include "tests/unit/temp_dir.h"

using namespace trainer::ckpt;
namespace fs = std::filesystem;

namespace {
std::string scratch(const std::string& name) {
  static const trainer::testing::TempDir dir("ckpt");  // removed at the test's exit
  return dir.file(name);
}
}  // namespace

TEST_CASE("safetensors_round_trip_keeps_values_shapes_and_metadata") {
  const std::vector<float> a = {1.5f, -2.25f, 3.0f, 1e-30f, 7.0f, 8.0f};
  const std::vector<float> b = {42.0f};
  const std::string path = scratch("rt.safetensors");
  write_safetensors(path, {{"a", "F32", {2, 3}, a.data(), 24}, {"b", "F32", {1}, b.data(), 4}},
                    {{"step", "12"}});
  SafetensorsReader r(path);
  CHECK(r.metadata().at("step") == "12");
  CHECK(r.info("a").shape == std::vector<int64_t>{2, 3});
  std::vector<float> got(6);
  r.read_f32("a", 0, 6, got.data());
  CHECK(got == a);
  float part[2];
  r.read_f32("a", 3, 2, part);
  CHECK(part[0] == a[3]);
  CHECK(part[1] == a[4]);
  r.read_f32("b", 0, 1, part);
  CHECK(part[0] == b[0]);
}

TEST_CASE("safetensors_header_is_le_length_then_json_with_data_offsets") {
  const std::vector<float> a = {1, 2, 3};
  const std::string path = scratch("hdr.safetensors");
  write_safetensors(path, {{"x", "F32", {3}, a.data(), 12}}, {});
  std::ifstream in(path, std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{len[i]} << (8 * i);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const auto j = nlohmann::json::parse(header);
  INFO(header);
  CHECK(j["x"]["data_offsets"] == nlohmann::json({0, 12}));
  CHECK(static_cast<int64_t>(fs::file_size(path)) == static_cast<int64_t>(8 + n + 12));
}

TEST_CASE("safetensors_truncated_file_is_refused") {
  const std::vector<float> a(100, 1.0f);
  const std::string path = scratch("trunc.safetensors");
  write_safetensors(path, {{"x", "F32", {100}, a.data(), 400}}, {});
  fs::resize_file(path, fs::file_size(path) - 10);
  CHECK_THROWS_WITH(SafetensorsReader(path), Catch::Contains("truncated"));
}

namespace {
// A file of a header `header` (padded as write_safetensors pads it) and 12 data bytes.
std::string file_with_header(const std::string& name, std::string header) {
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string path = scratch(name);
  std::ofstream out(path, std::ios::binary);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out << header << std::string(12, '\0');
  return path;
}
}  // namespace

TEST_CASE("safetensors_damaged_header_entries_are_refused_naming_the_tensor") {
  const std::string good = R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}})";
  CHECK(SafetensorsReader(file_with_header("good.safetensors", good)).info("x").end == 12);
  // A dtype this reader has no size for (newer safetensors' sub-byte F4, say) is kept as it is:
  // only reading it as F32 is refused.
  const std::string f4 = R"({"x": {"dtype": "F4", "shape": [24], "data_offsets": [0, 12]}})";
  SafetensorsReader newer(file_with_header("f4.safetensors", f4));
  CHECK(newer.info("x").dtype == "F4");
  float out[3];
  CHECK_THROWS_WITH(newer.read_f32("x", 0, 3, out), Catch::Contains("is not F32"));
  const std::pair<const char*, const char*> cases[] = {
      {R"({"x": {"dtype": "F32", "shape": [3]}})", "tensor 'x' has no data_offsets"},
      {R"({"x": {"shape": [3], "data_offsets": [0, 12]}})", "tensor 'x' has no dtype"},
      {R"({"x": 5})", "tensor 'x' is 5, not an object"},
      {R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": "a"}})",
       "tensor 'x' has data_offsets \"a\", not [begin, end]"},
      {R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [12, 0]}})",
       "tensor 'x' has data_offsets [12,0]"},
      {R"({"x": {"dtype": "F32", "shape": [-3], "data_offsets": [0, 12]}})",
       "tensor 'x' has shape [-3]"},
      {R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})",
       "tensor 'x' spans 12 bytes; its F32 shape [4] needs 4 x 4"},
      {R"({"x": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})",
       "tensor 'x' spans 0 bytes; its F32 shape [4611686018427387904] needs 4611686018427387904 x "
       "4"},
      {R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 18446744073709551615]}})",
       "tensor 'x' has data_offsets [0,18446744073709551615], not [begin, end]"},
      {R"({"x": {"dtype": 5, "shape": [3], "data_offsets": [0, 12]}})", "tensor 'x' has dtype 5"},
      {R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}, "__metadata__": [1]})",
       "__metadata__ is [1], not an object"},
      {R"({"__metadata__": {"format": 1}})", "__metadata__ 'format' is 1, not a string"},
      {R"([1, 2])", "not a JSON object"},
  };
  for (const auto& [header, why] : cases) {
    INFO(header);
    const std::string path = file_with_header("bad.safetensors", header);
    CHECK_THROWS_AS(SafetensorsReader(path), CheckpointError);
    CHECK_THROWS_WITH(SafetensorsReader(path), Catch::Contains(path + ": bad header: " + why));
  }
}

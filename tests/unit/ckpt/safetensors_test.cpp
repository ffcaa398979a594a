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

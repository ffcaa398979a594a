#pragma once
// safetensors files, written and read by hand: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {str: str}}, then the
// raw bytes. Only F32 and I64 tensors are used here.
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::ckpt {

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TensorToWrite {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t bytes = 0;
};

// Writes `path` whole or not at all (AtomicFileWriter). Returns the file's sha256.
std::string write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata);

struct TensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsReader {
 public:
  // Throws CheckpointError for a missing, truncated or malformed file.
  explicit SafetensorsReader(const std::string& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo& info(const std::string& name) const;
  // Reads float elements [first, first + count) of an F32 tensor.
  void read_f32(const std::string& name, int64_t first, int64_t count, float* out);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// fsync a directory so renames inside it are durable.
void fsync_dir(const std::string& dir);

}  // namespace trainer::ckpt

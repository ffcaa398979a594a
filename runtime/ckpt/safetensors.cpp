#include "runtime/ckpt/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/core/atomic_file.h"

namespace trainer::ckpt {
namespace {

std::string header_json(const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  int64_t at = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes}}};
    at += t.bytes;
  }
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');  // data section 8-byte aligned, as HF writes it
  return s;
}

[[noreturn]] void bad_header(const std::string& path, const std::string& what) {
  throw CheckpointError(path + ": bad header: " + what);
}

// Bytes per element of the whole-byte dtypes safetensors defines; 0 for any other.
int64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> bytes = {
      {"F64", 8}, {"I64", 8}, {"U64", 8},  {"F32", 4},     {"I32", 4},
      {"U32", 4}, {"F16", 2}, {"BF16", 2}, {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = bytes.find(dtype);
  return it == bytes.end() ? 0 : it->second;
}

// One tensor's entry, {"dtype", "shape", "data_offsets": [begin, end)}, checked the way the
// safetensors format defines it, so that a damaged header names the tensor and what is wrong.
TensorInfo tensor_info_from(const std::string& path, const std::string& name,
                            const nlohmann::json& v) {
  const std::string tensor = "tensor '" + name + "'";
  if (!v.is_object()) bad_header(path, tensor + " is " + v.dump() + ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad_header(path, tensor + " has no " + key);
  const nlohmann::json &dtype = v.at("dtype"), &shape = v.at("shape"),
                       &offsets = v.at("data_offsets");
  // A size or offset as JSON's unsigned integers, within int64_t.
  auto size_value = [](const nlohmann::json& n) {
    return n.is_number_unsigned() &&
           n.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  };
  if (!dtype.is_string()) bad_header(path, tensor + " has dtype " + dtype.dump());
  TensorInfo t;
  t.dtype = dtype.get<std::string>();
  int64_t numel = 1;
  if (!shape.is_array()) bad_header(path, tensor + " has shape " + shape.dump());
  for (const nlohmann::json& n : shape) {
    if (!size_value(n)) bad_header(path, tensor + " has shape " + shape.dump());
    t.shape.push_back(n.get<int64_t>());
    if (__builtin_mul_overflow(numel, t.shape.back(), &numel))
      bad_header(path, tensor + " has shape " + shape.dump() + ", too many elements");
  }
  if (!offsets.is_array() || offsets.size() != 2 || !size_value(offsets[0]) ||
      !size_value(offsets[1]) || offsets[0].get<int64_t>() > offsets[1].get<int64_t>())
    bad_header(path, tensor + " has data_offsets " + offsets.dump() + ", not [begin, end]");
  t.begin = offsets[0].get<int64_t>();
  t.end = offsets[1].get<int64_t>();
  // The span against the shape, for the dtypes of whole bytes this reader knows (others, sub-byte
  // ones among them, are kept as they are: only F32 tensors are ever read, by read_f32).
  int64_t bytes = 0;
  if (const int64_t size = dtype_bytes(t.dtype);
      size > 0 && (__builtin_mul_overflow(numel, size, &bytes) || t.end - t.begin != bytes))
    bad_header(path, tensor + " spans " + std::to_string(t.end - t.begin) + " bytes; its " +
                         t.dtype + " shape " + shape.dump() + " needs " + std::to_string(numel) +
                         " x " + std::to_string(size));
  return t;
}

std::map<std::string, std::string> metadata_from(const std::string& path, const nlohmann::json& v) {
  if (!v.is_object()) bad_header(path, "__metadata__ is " + v.dump() + ", not an object");
  std::map<std::string, std::string> out;
  for (const auto& [k, s] : v.items()) {
    if (!s.is_string())
      bad_header(path, "__metadata__ '" + k + "' is " + s.dump() + ", not a string");
    out[k] = s.get<std::string>();
  }
  return out;
}

}  // namespace

std::string write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const std::string header = header_json(tensors, metadata);
  AtomicFileWriter out(path, /*hash=*/true);
  const uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(len, 8);
  out.write(header.data(), header.size());
  for (const auto& t : tensors) out.write(t.data, static_cast<size_t>(t.bytes));
  return out.commit();
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  in_.open(path, std::ios::binary);
  if (!in_) throw CheckpointError("cannot open " + path);
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path));
  uint8_t len[8] = {};
  if (!in_.read(reinterpret_cast<char*>(len), 8)) throw CheckpointError(path + ": truncated");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  // (file_size < 8 where a file states no size, as /proc's: file_size - 8 would wrap to 2^64 - 8)
  if (file_size < 8 || n > static_cast<uint64_t>(file_size - 8))
    throw CheckpointError(path + ": bad header size");
  std::string header(n, '\0');
  in_.read(header.data(), static_cast<std::streamsize>(n));
  data_start_ = 8 + static_cast<int64_t>(n);
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": bad header: " + e.what());
  }
  if (!h.is_object()) throw CheckpointError(path + ": bad header: not a JSON object");
  int64_t data_end = 0;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      metadata_ = metadata_from(path, v);
      continue;
    }
    const TensorInfo t = tensor_info_from(path, name, v);
    data_end = std::max(data_end, t.end);
    tensors_[name] = t;
  }
  if (data_start_ + data_end > file_size)
    throw CheckpointError(path + ": truncated (" + std::to_string(file_size) +
                          " bytes, header needs " + std::to_string(data_start_ + data_end) + ")");
}

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw CheckpointError(path_ + ": no tensor '" + name + "'");
  return it->second;
}

void SafetensorsReader::read_f32(const std::string& name, int64_t first, int64_t count,
                                 float* out) {
  const TensorInfo& t = info(name);
  if (t.dtype != "F32") throw CheckpointError(path_ + ": tensor '" + name + "' is not F32");
  if (first < 0 || (first + count) * 4 > t.end - t.begin)
    throw CheckpointError(path_ + ": read past the end of '" + name + "'");
  in_.seekg(data_start_ + t.begin + first * 4);
  if (!in_.read(reinterpret_cast<char*>(out), count * 4))
    throw CheckpointError(path_ + ": short read of '" + name + "'");
}

}  // namespace trainer::ckpt

#include "runtime/ckpt/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/core/sha256.h"

namespace trainer::ckpt {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

// A file written through one fd: every byte also goes into the running sha256.
class HashingWriter {
 public:
  explicit HashingWriter(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd_ < 0) throw CheckpointError("cannot create " + path + ": " + errno_text());
  }
  ~HashingWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t n) {
    hash_.update(data, n);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw CheckpointError("write to " + path_ + " failed: " + errno_text());
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  std::string finish() {
    if (::fsync(fd_) != 0) throw CheckpointError("fsync " + path_ + ": " + errno_text());
    ::close(fd_);
    fd_ = -1;
    return hash_.final();
  }

 private:
  std::string path_;
  int fd_ = -1;
  Sha256 hash_;
};

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

}  // namespace

std::string write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const std::string tmp = path + ".tmp";
  const std::string header = header_json(tensors, metadata);
  std::string hash;
  {
    HashingWriter out(tmp);
    const uint64_t n = header.size();
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    out.write(len, 8);
    out.write(header.data(), header.size());
    for (const auto& t : tensors) out.write(t.data, static_cast<size_t>(t.bytes));
    hash = out.finish();
  }
  std::filesystem::rename(tmp, path);
  return hash;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    HashingWriter out(tmp);
    out.write(text.data(), text.size());
    out.finish();
  }
  std::filesystem::rename(tmp, path);
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
  if (n > static_cast<uint64_t>(file_size - 8)) throw CheckpointError(path + ": bad header size");
  std::string header(n, '\0');
  in_.read(header.data(), static_cast<std::streamsize>(n));
  data_start_ = 8 + static_cast<int64_t>(n);
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": bad header: " + e.what());
  }
  int64_t data_end = 0;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, s] : v.items()) metadata_[k] = s.get<std::string>();
      continue;
    }
    TensorInfo t{v.at("dtype").get<std::string>(), v.at("shape").get<std::vector<int64_t>>(),
                 v.at("data_offsets")[0].get<int64_t>(), v.at("data_offsets")[1].get<int64_t>()};
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

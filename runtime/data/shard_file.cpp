#include "runtime/data/shard_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "runtime/core/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/data/data_error.h"
#include "runtime/data/mapped_copy.h"

namespace trainer::data {
namespace {

using Header = std::array<int32_t, kShardHeaderInts>;

// Closes a file descriptor on scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("token shard " + path + ": " + what);
}

Header read_header(int fd, const std::string& path, int64_t file_bytes) {
  if (file_bytes < kShardHeaderBytes) {
    fail(path, "file is " + std::to_string(file_bytes) + " bytes, expected at least the " +
                   std::to_string(kShardHeaderBytes) + "-byte header (truncated?)");
  }
  Header header{};
  if (::pread(fd, header.data(), kShardHeaderBytes, 0) != kShardHeaderBytes) {
    fail(path, std::string("cannot read header: ") + std::strerror(errno));
  }
  return header;
}

void check_header(const Header& header, const std::string& path, int64_t file_bytes) {
  if (header[0] != kShardMagic) {
    fail(path, "bad magic: expected " + std::to_string(kShardMagic) +
                   " (llm.c token shard), found " + std::to_string(header[0]));
  }
  if (header[1] != kShardVersion) {
    fail(path, "unsupported version: expected " + std::to_string(kShardVersion) +
                   " (uint16 tokens), found " + std::to_string(header[1]));
  }
  if (header[2] < 0) fail(path, "negative token count " + std::to_string(header[2]));
  const int64_t expected = kShardHeaderBytes + 2 * static_cast<int64_t>(header[2]);
  if (file_bytes != expected) {
    std::ostringstream os;
    os << "file size is " << file_bytes << " bytes, expected " << expected
       << " (1024-byte header + " << header[2]
       << " tokens x 2 bytes): " << (file_bytes < expected ? "truncated" : "extra bytes");
    fail(path, os.str());
  }
}

}  // namespace

ShardReader::ShardReader(std::string path) : path_(std::move(path)) {
  // O_NONBLOCK: a named pipe would block the open until a writer came; it is refused below.
  FdGuard guard{::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (guard.fd < 0) fail(path_, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) fail(path_, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path_, "not a regular file");
  const auto file_bytes = static_cast<int64_t>(st.st_size);
  check_header(read_header(guard.fd, path_, file_bytes), path_, file_bytes);

  count_ = (file_bytes - kShardHeaderBytes) / 2;
  map_bytes_ = static_cast<size_t>(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(path_, std::string("cannot mmap: ") + std::strerror(errno));
  }
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kShardHeaderBytes);
}

ShardReader::~ShardReader() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

void ShardReader::read(int64_t pos, int64_t n, int32_t* out) const {
  TRAINER_CHECK(pos >= 0 && n >= 0 && pos + n <= count_, path_ << ": read [" << pos << ", "
                                                               << pos + n << ") outside " << count_
                                                               << " tokens");
  const int bus = copy_from_mapping(tokens_ + pos, n, out);
  if (bus == 0) return;
  const std::string range = "[" + std::to_string(pos) + ", " + std::to_string(pos + n) + ")";
  if (bus == BUS_ADRERR)
    fail(path_, "the file lost its tokens " + range +
                    " while the run read it: it was truncated or overwritten in place (copy a "
                    "new shard beside it and rename it over, which a running job does not see)");
  // not the input's fault: an error like any other I/O error (exit 1)
  throw std::runtime_error("token shard " + path_ + ": reading tokens " + range +
                           " failed (SIGBUS, si_code " + std::to_string(bus) +
                           "): an I/O error under the mapped file, or a memory error");
}

void write_shard(const std::string& path, std::span<const uint16_t> tokens) {
  TRAINER_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX),
                path << ": " << tokens.size() << " tokens do not fit one shard's int32 count");
  Header header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());

  AtomicFileWriter out(path);
  out.write(header.data(), header.size() * sizeof(int32_t));
  out.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  out.commit();
}

}  // namespace trainer::data

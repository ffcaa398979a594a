#pragma once
// AtomicFileWriter: writes a file whole or not at all. The bytes go to a temporary file beside
// `path` (`path.tmp.<random>`), named for this writer alone: two processes exporting to one path,
// or a retry while the first export still runs, must not write into one temporary; each renames
// its own whole file and the last rename wins. commit() fsyncs and renames it. A writer destroyed
// uncommitted (a write failed: a full disk) removes its temporary; one killed leaves it.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "runtime/core/sha256.h"

namespace trainer {

struct FileWriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class AtomicFileWriter {
 public:
  // FileWriteError naming the temporary. `hash`: keep a sha256 of the bytes for commit().
  explicit AtomicFileWriter(std::string path, bool hash = false);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);  // FileWriteError with the cause (ENOSPC, ...)
  // fsync, then the rename onto `path`. Returns the sha256 (hex) of the bytes written, or ""
  // without `hash`.
  std::string commit();
  const std::string& temporary() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool hashing_;
  bool committed_ = false;
  Sha256 hash_;
};

// `bytes` as the whole file at `path`, by an AtomicFileWriter (FileWriteError on failure).
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace trainer

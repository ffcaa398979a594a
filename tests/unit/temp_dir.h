#pragma once
// A fresh scratch directory for a test, under $TRAINER_TEST_TMP (or the system temp dir), removed
// when it goes out of scope (a function-local static one: at the test process's exit).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace trainer::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const char* base = std::getenv("TRAINER_TEST_TMP");
    const std::filesystem::path root = base ? base : std::filesystem::temp_directory_path();
    path_ = root / ("unit_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;  // never throw from a destructor
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace trainer::testing

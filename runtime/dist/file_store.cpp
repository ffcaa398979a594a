// FileStore: one file per key in a shared directory. A value is written to a temporary file and
// renamed into place, so readers never see part of one; add() serialises on a per-key flock;
// get/wait poll with a short sleep.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "runtime/core/atomic_file.h"
#include "runtime/dist/store.h"

namespace trainer::dist {
namespace {

namespace fs = std::filesystem;

// Keys may hold '/' and other characters a file name cannot: escape all but [A-Za-z0-9._-].
std::string escape_key(const std::string& key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "k_";
  for (unsigned char ch : key) {
    if (std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

class FileStore : public Store {
 public:
  FileStore(const std::string& dir, std::chrono::milliseconds timeout)
      : dir_(dir), timeout_(timeout) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (!fs::is_directory(dir_)) throw StoreError("FileStore: cannot create directory " + dir);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    write_atomically(path(key), value);
  }

  std::vector<uint8_t> get(const std::string& key) override {
    wait({key});
    std::vector<uint8_t> v;
    if (!read(path(key), &v)) throw StoreError("FileStore: cannot read key '" + key + "'");
    return v;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::string lock_path = path(key) + ".lock";
    int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) throw StoreError("FileStore: cannot open lock file " + lock_path);
    ::flock(fd, LOCK_EX);
    struct Unlock {  // also when the value is not a number or the write fails
      int fd;
      ~Unlock() {
        ::flock(fd, LOCK_UN);
        ::close(fd);
      }
    } unlock{fd};
    int64_t v = 0;
    std::vector<uint8_t> old;
    if (read(path(key), &old)) {
      const std::string text(old.begin(), old.end());
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size())
        throw StoreError("FileStore add: key '" + key + "' holds '" + text + "', not an integer");
    }
    v += delta;
    std::string s = std::to_string(v);
    write_atomically(path(key), std::vector<uint8_t>(s.begin(), s.end()));
    return v;
  }

  void wait(const std::vector<std::string>& keys) override {
    auto deadline = std::chrono::steady_clock::now() + timeout();
    while (true) {
      std::vector<std::string> missing;
      for (const auto& k : keys)
        if (!fs::exists(path(k))) missing.push_back(k);
      if (missing.empty()) return;
      if (std::chrono::steady_clock::now() >= deadline) throw_timeout(missing);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys)
      if (!fs::exists(path(k))) return false;
    return true;
  }

  void set_timeout(std::chrono::milliseconds t) override { timeout_ = t; }
  std::chrono::milliseconds timeout() const override { return timeout_.load(); }

 private:
  std::string path(const std::string& key) const { return (dir_ / escape_key(key)).string(); }

  // (a temporary of a random name: ranks on other nodes of the shared directory may share a pid)
  static void write_atomically(const std::string& final_path, const std::vector<uint8_t>& value) {
    try {
      write_file_atomic(
          final_path, std::string_view(reinterpret_cast<const char*>(value.data()), value.size()));
    } catch (const FileWriteError& e) {
      throw StoreError(std::string("FileStore: ") + e.what());
    }
  }

  static bool read(const std::string& p, std::vector<uint8_t>* out) {
    std::ifstream f(p, std::ios::binary);
    if (!f) return false;
    out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    return true;
  }

  [[noreturn]] void throw_timeout(const std::vector<std::string>& missing) const {
    std::string names;
    for (const auto& k : missing) names += (names.empty() ? "'" : ", '") + k + "'";
    throw StoreTimeout("FileStore: timed out after " + std::to_string(timeout().count()) +
                       " ms waiting for key(s) " + names + " in " + dir_.string());
  }

  fs::path dir_;
  std::atomic<std::chrono::milliseconds> timeout_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& dir, std::chrono::milliseconds timeout) {
  return std::make_shared<FileStore>(dir, timeout);
}

}  // namespace trainer::dist

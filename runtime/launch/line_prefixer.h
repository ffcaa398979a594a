#pragma once
// LinePrefixer: turns a child's byte stream into whole lines, each written as "[rank N] line\n"
// in one piece, so lines of different ranks never mix.
#include <string>

namespace trainer::launch {

class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}
  void feed(const char* data, size_t n);  // writes every completed line
  void finish();                          // end of stream: writes a trailing partial line

 private:
  static constexpr size_t kMaxLine = 1 << 20;  // longer "lines" are cut to bound memory
  std::string prefix_;
  int out_fd_;
  std::string pending_;
};

// write(2) until all of `s` is out (retries EINTR and short writes; gives up on other errors).
void write_all(int fd, const std::string& s);

}  // namespace trainer::launch

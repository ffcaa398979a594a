#pragma once
// Helpers for launcher tests: a temporary file to capture output, and shell children.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/launch/child_process.h"
#include "runtime/launch/launch_plan.h"

namespace launch_test {

class Capture {
 public:
  Capture() : f_(std::tmpfile()) {}
  ~Capture() { std::fclose(f_); }
  int fd() const { return fileno(f_); }
  std::string text() const {
    std::string s;
    char buf[4096];
    ssize_t n;
    for (off_t off = 0; (n = ::pread(fd(), buf, sizeof buf, off)) > 0; off += n) s.append(buf, n);
    return s;
  }

 private:
  FILE* f_;
};

inline trainer::launch::ChildSpec sh(const std::string& script) {
  return {{"/bin/sh", "-c", script}, trainer::launch::current_environment()};
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    out.push_back(text.substr(start, nl - start));
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

}  // namespace launch_test

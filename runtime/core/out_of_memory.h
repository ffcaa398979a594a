#pragma once
// OutOfMemory: a std::bad_alloc that says what could not be had ("cpu backend: cannot allocate
// N bytes ...", "step 3: ..."), so the message survives rethrowing and main can still tell a
// machine out of memory from other failures.
#include <new>
#include <string>

namespace trainer {

class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

}  // namespace trainer

#pragma once
// BackendBuffer: an fp32 buffer owned through a Backend's alloc/free (device memory on cuda), for
// scratch that lives as long as its owner, such as ZeRO's communication staging.
#include <cstdint>

#include "runtime/core/backend.h"

namespace trainer {

class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, int64_t numel);  // zeroed
  ~BackendBuffer();
  BackendBuffer(BackendBuffer&& o) noexcept;
  BackendBuffer& operator=(BackendBuffer&& o) noexcept;
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  const Tensor& tensor() const { return t_; }
  Tensor slice(int64_t offset, int64_t n) const { return t_.slice(offset, n); }
  float* data() const { return static_cast<float*>(t_.data); }
  // 0 when empty (an empty Tensor's shape {} would count as one element).
  int64_t numel() const { return be_ ? t_.numel() : 0; }
  int64_t nbytes() const { return be_ ? static_cast<int64_t>(t_.nbytes()) : 0; }

 private:
  void reset();
  Backend* be_ = nullptr;
  Tensor t_;
};

}  // namespace trainer

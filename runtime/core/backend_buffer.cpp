#include "runtime/core/backend_buffer.h"

#include <utility>

namespace trainer {

BackendBuffer::BackendBuffer(Backend& be, int64_t numel) : be_(&be) {
  const auto bytes = static_cast<size_t>(numel) * sizeof(float);
  t_ = Tensor(be.alloc(bytes), {numel}, DType::f32, be.device());
  be.zero(t_);
}

BackendBuffer::~BackendBuffer() {
  reset();
}

BackendBuffer::BackendBuffer(BackendBuffer&& o) noexcept
    : be_(std::exchange(o.be_, nullptr)), t_(std::exchange(o.t_, Tensor())) {}

BackendBuffer& BackendBuffer::operator=(BackendBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    be_ = std::exchange(o.be_, nullptr);
    t_ = std::exchange(o.t_, Tensor());
  }
  return *this;
}

void BackendBuffer::reset() {
  if (be_ && t_.data) be_->free(t_.data);
  be_ = nullptr;
  t_ = Tensor();
}

}  // namespace trainer

#include "runtime/core/tensor.h"

#include <stdexcept>

#include "runtime/core/check.h"

namespace trainer {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> d) {
  TRAINER_CHECK(d.size() <= kMaxDims, "tensor rank " << d.size() << " exceeds " << kMaxDims);
  for (int64_t v : d) dims[static_cast<size_t>(rank++)] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<size_t>(i)]);
  }
  return s + "]";
}

float* Tensor::f32() const {
  TRAINER_CHECK(dtype == DType::f32, "expected an f32 tensor, got " << dtype_name(dtype));
  return static_cast<float*>(data);
}

int32_t* Tensor::i32() const {
  TRAINER_CHECK(dtype == DType::i32, "expected an i32 tensor, got " << dtype_name(dtype));
  return static_cast<int32_t*>(data);
}

Tensor Tensor::view(Shape s) const {
  TRAINER_CHECK(s.numel() == numel(), "view " << s.str() << " of tensor " << shape.str());
  return Tensor(data, s, dtype, device);
}

Tensor Tensor::slice(int64_t offset, int64_t n) const {
  if (empty()) return Tensor();
  if (n == 0) return Tensor(data, {0}, dtype, device);  // touches nothing: any offset will do
  TRAINER_CHECK(offset >= 0 && n >= 0 && offset + n <= numel(),
                "slice [" << offset << ", " << offset + n << ") of tensor " << shape.str());
  const size_t bytes = static_cast<size_t>(offset) * dtype_size(dtype);
  return Tensor(static_cast<char*>(data) + bytes, {n}, dtype, device);
}

}  // namespace trainer

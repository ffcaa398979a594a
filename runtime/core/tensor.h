#pragma once
// Tensor: a typed view (pointer + shape) into memory owned by someone else (an arena or a buffer).
// Tensors never own memory; the model keeps all parameters, gradients and activations in a few
// large allocations and hands out views, as llm.c does.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace trainer {

enum class DType : uint8_t { f32, bf16, i32 };
enum class DeviceType : uint8_t { cpu, cuda };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct Shape {
  static constexpr int kMaxDims = 4;
  std::array<int64_t, kMaxDims> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;
};

struct Tensor {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;
  DeviceType device = DeviceType::cpu;

  Tensor() = default;
  Tensor(void* d, Shape s, DType t = DType::f32, DeviceType dev = DeviceType::cpu)
      : data(d), shape(s), dtype(t), device(dev) {}

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }
  float* f32() const;    // checked access for fp32 tensors
  int32_t* i32() const;  // checked access for int32 tensors
  // Same memory, new shape of equal element count.
  Tensor view(Shape s) const;
  // Elements [offset, offset + n) of the flat storage as a 1-D tensor (an empty tensor stays
  // empty: an absent optional argument; n = 0 gives a 0-element tensor whatever the offset).
  Tensor slice(int64_t offset, int64_t n) const;
};

}  // namespace trainer

#pragma once
// Calls f(T{}) with the C++ type of a CommDType, so typed code is written once per op.
#include <cstdint>

#include "runtime/dist/comm.h"

namespace trainer::dist {

template <typename F>
void dispatch_dtype(CommDType t, F&& f) {
  switch (t) {
    case CommDType::f32:
      return f(float{});
    case CommDType::f64:
      return f(double{});
    case CommDType::i32:
      return f(int32_t{});
    case CommDType::i64:
      return f(int64_t{});
    case CommDType::u8:
      return f(uint8_t{});
  }
}

// Elementwise acc[i] = op(acc[i], x[i]) for sum/avg (both sum here) and max.
template <typename T>
void reduce_into(T* acc, const T* x, size_t n, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] < x[i] ? x[i] : acc[i];
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] + x[i]);
  }
}

// avg = sum / n (integer division for integer types).
template <typename T>
void divide_by(T* data, size_t count, int n) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] / static_cast<T>(n));
}

}  // namespace trainer::dist

#include <cstdint>

#include "runtime/dist/comm.h"

namespace trainer::dist {

size_t comm_dtype_size(CommDType t) {
  switch (t) {
    case CommDType::f32:
      return 4;
    case CommDType::f64:
      return 8;
    case CommDType::i32:
      return 4;
    case CommDType::i64:
      return 8;
    case CommDType::u8:
      return 1;
  }
  return 0;
}

}  // namespace trainer::dist

#include "runtime/core/backend.h"

#include "runtime/core/check.h"

namespace trainer {

void* Backend::alloc_released(size_t bytes) {
  void* p = alloc_releasable(bytes);
  const auto n = static_cast<int64_t>(bytes / 4);
  release(Tensor(p, {n}, DType::f32, device()), 0.0f);
  return p;
}

void Backend::attention_forward_cp(Tensor, Tensor, const Tensor&, ContextSplit, int) {
  TRAINER_CHECK(false, "the " << name() << " backend has no context-parallel attention");
}

void Backend::attention_backward_cp(Tensor, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, ContextSplit, int) {
  TRAINER_CHECK(false, "the " << name() << " backend has no context-parallel attention");
}

}  // namespace trainer

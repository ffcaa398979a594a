#include "runtime/core/backend.h"

#include "runtime/core/check.h"

namespace trainer {

void Backend::attention_forward_cp(Tensor, Tensor, const Tensor&, ContextSplit, int) {
  TRAINER_CHECK(false, "the " << name() << " backend has no context-parallel attention");
}

void Backend::attention_backward_cp(Tensor, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, ContextSplit, int) {
  TRAINER_CHECK(false, "the " << name() << " backend has no context-parallel attention");
}

}  // namespace trainer

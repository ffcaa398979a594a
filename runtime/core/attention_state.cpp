#include "runtime/core/attention_state.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace trainer {

AttentionKernel attention_kernel_from_env() {
  const char* value = std::getenv("TRAINER_ATTENTION");
  if (!value || !*value) return AttentionKernel::tensor_core;
  const std::string kernel = value;
  if (kernel == "tensor_core") return AttentionKernel::tensor_core;
  if (kernel == "tensor_core_32") return AttentionKernel::tensor_core_32;
  if (kernel == "wmma") return AttentionKernel::wmma;
  if (kernel == "flash") return AttentionKernel::flash;
  if (kernel == "reference") return AttentionKernel::reference;
  if (kernel == "cudnn") return AttentionKernel::cudnn;
  throw std::invalid_argument(
      "TRAINER_ATTENTION = '" + kernel +
      "': allowed are tensor_core (the default), tensor_core_32, wmma, flash, reference, cudnn");
}

std::string flash_head_sizes_text() {
  std::string text;
  for (size_t i = 0; i < kFlashHeadSizes.size(); ++i)
    text += (i == 0                            ? ""
             : i + 1 == kFlashHeadSizes.size() ? " and "
                                               : ", ") +
            std::to_string(kFlashHeadSizes[i]);
  return text;
}

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::tensor_core:
      return "tensor_core";
    case AttentionKernel::tensor_core_32:
      return "tensor_core_32";
    case AttentionKernel::wmma:
      return "wmma";
    case AttentionKernel::flash:
      return "flash";
    case AttentionKernel::reference:
      return "reference";
    case AttentionKernel::cudnn:
      return "cudnn";
  }
  return "?";
}

}  // namespace trainer

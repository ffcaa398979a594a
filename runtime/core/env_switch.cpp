#include "runtime/core/env_switch.h"

#include <cstdlib>
#include <stdexcept>

namespace trainer {

bool env_switch(const char* name, bool fallback, const std::string& on_means,
                const std::string& off_means) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return fallback;
  const std::string value = e;
  if (value != "0" && value != "1")
    throw std::invalid_argument(std::string(name) + " = '" + value + "': allowed are 1 (" +
                                on_means + ") and 0 (" + off_means + ")");
  return value == "1";
}

bool gemm_autotune_from_env() {
  return env_switch("TRAINER_GEMM_AUTOTUNE", false, "each GEMM shape times cuBLASLt's candidates",
                    "the heuristic's first, the default");
}

bool cuda_unmap_from_env() {
  return env_switch("TRAINER_CUDA_UNMAP", true, "ZeRO's released pages are unmapped, the default",
                    "they stay mapped and are filled");
}

}  // namespace trainer

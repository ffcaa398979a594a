#pragma once
// An on/off setting from an environment variable (TRAINER_CUDA_UNMAP, TRAINER_GEMM_AUTOTUNE,
// ...): one reading for the backend that acts on it and for `trainer plan`, which estimates with
// it.
#include <string>

namespace trainer {

// Unset or empty: `fallback`; "1" or "0" as said; anything else throws std::invalid_argument
// naming the variable, its value and what 1 and 0 mean (bad input: the callers make it a
// config::ConfigError, exit status 2).
bool env_switch(const char* name, bool fallback, const std::string& on_means,
                const std::string& off_means);

// TRAINER_CUDA_UNMAP (default 1): whether the cuda backend unmaps the pages ZeRO releases.
bool cuda_unmap_from_env();
// TRAINER_GEMM_AUTOTUNE (default 0): whether the cuda backend times cuBLASLt's candidate
// algorithms for each GEMM shape (the config's run.deterministic refuses it).
bool gemm_autotune_from_env();

}  // namespace trainer

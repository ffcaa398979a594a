#pragma once
// The cpu reference math: plain templated functions (float for the backend, double for
// finite-difference references and tests), shapes in each signature, llm.c style.
// Backward functions ACCUMULATE into their gradients; a null gradient pointer means "not needed".
#include "runtime/cpu/ops_attention.h"
#include "runtime/cpu/ops_gemm.h"
#include "runtime/cpu/ops_layers.h"
#include "runtime/cpu/ops_loss.h"
#include "runtime/cpu/ops_moe.h"
#include "runtime/cpu/ops_optim.h"

#pragma once
// The kernels of kernels/*.cu compiled for the cpu emulation (cuda_emulation.h), in namespace
// trainer::kernels_emulated so they never meet the real cuda library's symbols. The emulated_*.cpp
// files each compile one kernel source; tests include this after their other headers and call
// the launchers of kernels/kernels.h as trainer::kernels_emulated::...
#define TRAINER_CUDA_EMULATION 1
#include "tests/unit/kernels/cuda_emulation.h"

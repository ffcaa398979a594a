// kernels/moe.cu, compiled for the cpu emulation (see emulated.h).
#include "tests/unit/kernels/emulated.h"
#define kernels kernels_emulated
#include "kernels/moe.cu"

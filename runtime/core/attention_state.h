#pragma once
// What attention keeps per layer for its backward (Backend::attention_state_shape), one rule for
// the backends and for `trainer plan`: the FlashAttention-style kernels keep each row's
// log-sum-exp [B,NH,T]; the reference (the cpu backend, the cuda reference kernels, and head
// sizes the flash kernels are not compiled for) keeps the probabilities [B,NH,T,T].
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "runtime/core/tensor.h"

namespace trainer {

// The cuda backend's attention kernels, chosen by the environment variable TRAINER_ATTENTION:
//   tensor_core (default): FlashAttention-2 kernels on mma.sync with their tiles in registers,
//              for a bf16 out and head sizes 32, 64, 80, 96, 128; else as flash.
//   tensor_core_32: the same with 32 rows a warp in the forward and dq (two 16-row slabs sharing
//              each K/V fragment read; bit for bit the same outputs), to measure against the
//              default; above head size 64 the same as tensor_core.
//   wmma:      the same on the WMMA API, tiles through shared memory (the earlier kernels, kept
//              to compare against), head sizes 32, 64; else as flash.
//   flash:     FlashAttention-style kernels on CUDA cores, kFlashHeadSizes.
//   reference: simple kernels that keep the probabilities, any head size.
//   cudnn:     cuDNN's fused flash attention (its backend graph API; libcudnn loaded at run
//              time) for a bf16 qkv and out and the head sizes the flash kernels take
//              (kFlashHeadSizes), where cuDNN has an engine for the shape; the same row statistics,
//              so any shape it refuses runs tensor_core's kernels instead. Else as tensor_core. Its
//              backward accumulates dq with atomics: not bitwise deterministic, unlike the others.
enum class AttentionKernel { tensor_core, tensor_core_32, wmma, flash, reference, cudnn };

// TRAINER_ATTENTION's choice (unset or empty: tensor_core). Another value throws
// std::invalid_argument naming the variable, the value and the allowed ones.
AttentionKernel attention_kernel_from_env();

// The scores' scale, 1/sqrt(head size): one value for every attention implementation.
inline float attention_scale(int64_t head_size) {
  return 1.0f / std::sqrt(static_cast<float>(head_size));
}

// The value of TRAINER_ATTENTION that chooses `kernel`.
const char* attention_kernel_name(AttentionKernel kernel);

// The head sizes the flash kernels are compiled for: kernels/flash_attention.cu's, and from 32
// kernels/flash_attention_mma.cu's (each checks its own list against this one).
inline constexpr std::array<int64_t, 6> kFlashHeadSizes = {16, 32, 64, 80, 96, 128};
constexpr bool flash_attention_head_size(int64_t head_size) {
  for (const int64_t size : kFlashHeadSizes)
    if (size == head_size) return true;
  return false;
}
// "16, 32, 64, 80, 96 and 128", for messages.
std::string flash_head_sizes_text();

// Whether the cuda backend runs a flash kernel (and keeps row statistics) for this head size.
constexpr bool cuda_attention_uses_flash(AttentionKernel kernel, int64_t head_size) {
  return kernel != AttentionKernel::reference && flash_attention_head_size(head_size);
}

// Context parallelism: this rank's place in the cp group (Backend::attention_forward_cp).
struct ContextSplit {
  int rank = 0, size = 1;
};

// Which of a sequence's 2 * cp chunks cp rank `rank` runs as its first (half 0) or second (half
// 1) part: `rank` and 2 * cp - 1 - rank (Megatron's load balance). The one definition of the
// layout for the model, the cpu ops and the cuda kernels (constexpr: device code calls it too).
constexpr int64_t context_chunk(int64_t rank, int64_t cp, int64_t half) {
  return half == 0 ? rank : 2 * cp - 1 - rank;
}

inline Shape attention_state_shape_of(bool flash, int64_t B, int64_t NH, int64_t T) {
  return flash ? Shape{B, NH, T} : Shape{B, NH, T, T};
}

}  // namespace trainer

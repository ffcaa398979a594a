// Causal self-attention, FlashAttention-style (Dao et al.; FlashAttention-2's loop order): the
// T x T matrix never exists. Forward streams key/value tiles through shared memory with an online
// softmax and keeps each row's log-sum-exp; backward recomputes the probabilities tile by tile
// from it. fp32 math on CUDA cores; head sizes 16, 32 and 64 (others use attention.cu).
//
// Deterministic: every output element is written by one thread, in a fixed order, without
// atomics. dq (one thread per query row) and dk/dv (one thread per key row) are two kernels, so
// the probabilities are recomputed twice in backward instead of summing dq with atomics.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/flash_attention_kernels.cuh"
#include "kernels/kernels.h"

namespace trainer::kernels {
namespace {

using flash::kTile;

dim3 grid(int64_t B, int64_t T, int64_t NH) {
  return dim3(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(B * NH));
}

float scale_for(int64_t HS) {
  return 1.0f / std::sqrt(float(HS));
}

// Calls f(std::integral_constant<int, HS>) for a supported head size.
template <class F>
void with_head_size(int64_t HS, F&& f) {
  switch (HS) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    default:
      throw std::invalid_argument("flash attention: head size " + std::to_string(HS) +
                                  " is not compiled (16, 32, 64); use the reference kernels");
  }
}

}  // namespace

bool flash_attention_supports(int64_t head_size) {
  return head_size == 16 || head_size == 32 || head_size == 64;
}

template <class OutT>
void flash_attention_forward(OutT* out, float* lse, const float* qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, cudaStream_t stream) {
  if (B * T == 0) return;
  with_head_size(C / NH, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    launch(flash::flash_forward_kernel<HS, OutT>, grid(B, T, NH), kTile, stream, out, lse, qkv, T,
           C, NH, scale_for(HS));
    CUDA_CHECK_LAUNCH("flash_forward_kernel");
  });
}

template <class OutT>
void flash_attention_backward(float* dqkv, float* dsum_scratch, const float* dout, const float* qkv,
                              const OutT* out, const float* lse, int64_t B, int64_t T, int64_t C,
                              int64_t NH, cudaStream_t stream) {
  if (B * T == 0) return;
  with_head_size(C / NH, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    launch(flash::flash_backward_dq_kernel<HS, OutT>, grid(B, T, NH), kTile, stream, dqkv,
           dsum_scratch, dout, qkv, out, lse, T, C, NH, scale_for(HS));
    CUDA_CHECK_LAUNCH("flash_backward_dq_kernel");
    launch(flash::flash_backward_dkdv_kernel<HS>, grid(B, T, NH), kTile, stream, dqkv, dsum_scratch,
           dout, qkv, lse, T, C, NH, scale_for(HS));
    CUDA_CHECK_LAUNCH("flash_backward_dkdv_kernel");
  });
}

template void flash_attention_forward(float*, float*, const float*, int64_t, int64_t, int64_t,
                                      int64_t, cudaStream_t);
template void flash_attention_forward(uint16_t*, float*, const float*, int64_t, int64_t, int64_t,
                                      int64_t, cudaStream_t);
template void flash_attention_backward(float*, float*, const float*, const float*, const float*,
                                       const float*, int64_t, int64_t, int64_t, int64_t,
                                       cudaStream_t);
template void flash_attention_backward(float*, float*, const float*, const float*, const uint16_t*,
                                       const float*, int64_t, int64_t, int64_t, int64_t,
                                       cudaStream_t);

}  // namespace trainer::kernels

// Fused softmax + cross-entropy (runtime/cpu/ops_loss.h): one block per row of logits.
#include <cmath>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace trainer::kernels {
namespace {

template <class LogitT>
__global__ void softmax_cross_entropy_kernel(LogitT* logits, float* losses, const int32_t* targets,
                                             int64_t V, int64_t Vp, float dloss_scale) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  LogitT* z = logits + row * Vp;
  const int64_t target = targets[row];
  const bool write_grad = dloss_scale != 0.0f;
  if (write_grad)  // vocabulary padding: no gradient
    for (int64_t j = V + threadIdx.x; j < Vp; j += blockDim.x) store_out(z + j, 0.0f);
  if (target < 0 || target >= V) {  // ignored row (or a bad target: NaN loss, no OOB read)
    if (threadIdx.x == 0) losses[row] = target < 0 ? 0.0f : NAN;
    if (write_grad)
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) store_out(z + j, 0.0f);
    return;
  }
  const float z_target = load_in(z + target);
  float maxv = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) maxv = fmaxf(maxv, load_in(z + j));
  maxv = block_reduce(maxv, red, MaxOp{}, -INFINITY);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) sum += expf(load_in(z + j) - maxv);
  sum = block_reduce(sum, red, SumOp{}, 0.0f);
  if (threadIdx.x == 0) losses[row] = logf(sum) + maxv - z_target;
  if (!write_grad) return;
  const float inv_sum = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    store_out(z + j,
              (expf(load_in(z + j) - maxv) * inv_sum - (j == target ? 1.0f : 0.0f)) * dloss_scale);
}

}  // namespace

template <class LogitT>
void softmax_cross_entropy(LogitT* logits, float* losses, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float dloss_scale, cudaStream_t stream) {
  if (N == 0) return;
  const int threads = V >= 1024 ? 1024 : (V >= 256 ? 256 : 64);
  launch(softmax_cross_entropy_kernel<LogitT>, static_cast<unsigned>(N), threads, stream, logits,
         losses, targets, V, Vp, dloss_scale);
  CUDA_CHECK_LAUNCH("softmax_cross_entropy_kernel");
}
template void softmax_cross_entropy(float*, float*, const int32_t*, int64_t, int64_t, int64_t,
                                    float, cudaStream_t);
template void softmax_cross_entropy(uint16_t*, float*, const int32_t*, int64_t, int64_t, int64_t,
                                    float, cudaStream_t);

}  // namespace trainer::kernels

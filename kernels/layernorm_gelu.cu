// LayerNorm, GELU and bias kernels (GPT-2 numerics, see runtime/cpu/ops_layers.h).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace trainer::kernels {
namespace {

constexpr float kEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
constexpr int kRowsPerBlock = 8;  // one warp per row

template <class OutT>
__global__ void layernorm_forward_kernel(OutT* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t N,
                                         int64_t C) {
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + row * C;
  float s = 0;
  for (int64_t c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / float(C);
  float var = 0;
  for (int64_t c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
  const float r = 1.0f / sqrtf(warp_sum(var) / float(C) + kEps);
  OutT* y = out + row * C;
  for (int64_t c = lane; c < C; c += 32)
    store_out(y + c, (x[c] - m) * r * weight[c] + (bias ? bias[c] : 0.0f));
  if (lane == 0 && mean) mean[row] = m;
  if (lane == 0 && rstd) rstd[row] = r;
}

__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int64_t N, int64_t C) {
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *x = inp + row * C, *dy = dout + row * C;
  const float m = mean[row], s = rstd[row];
  float dmean = 0, dnorm_mean = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float dnorm = weight[c] * dy[c];
    dmean += dnorm;
    dnorm_mean += dnorm * (x[c] - m) * s;
  }
  dmean = warp_sum(dmean) / float(C);
  dnorm_mean = warp_sum(dnorm_mean) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * s;
    dinp[row * C + c] += (weight[c] * dy[c] - dmean - norm * dnorm_mean) * s;
  }
}

// Column sums over rows, deterministic: a block covers 32 columns; its 8 row lanes each sum rows
// lane, lane+8, ... in order, then lane 0 adds the 8 partials in order.
constexpr int kColLanes = 8;

__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                                 const float* inp, const float* mean,
                                                 const float* rstd, int64_t N, int64_t C) {
  __shared__ float sw[kColLanes][32], sb[kColLanes][32];
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x;
  float w = 0, b = 0;
  if (c < C)
    for (int64_t i = threadIdx.y; i < N; i += kColLanes) {
      const float dy = dout[i * C + c];
      w += dy * (inp[i * C + c] - mean[i]) * rstd[i];
      b += dy;
    }
  sw[threadIdx.y][threadIdx.x] = w;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int l = 1; l < kColLanes; ++l) w += sw[l][threadIdx.x], b += sb[l][threadIdx.x];
  if (dweight) dweight[c] += w;
  if (dbias) dbias[c] += b;
}

__global__ void bias_backward_kernel(float* dbias, const float* dout, int64_t N, int64_t OC) {
  __shared__ float sb[kColLanes][32];
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x;
  float b = 0;
  if (c < OC)
    for (int64_t i = threadIdx.y; i < N; i += kColLanes) b += dout[i * OC + c];
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= OC) return;
  for (int l = 1; l < kColLanes; ++l) b += sb[l][threadIdx.x];
  dbias[c] += b;
}

__global__ void add_bias_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < N * OC;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] += bias[i % OC];
}

template <class OutT>
__global__ void gelu_forward_kernel(OutT* out, const float* inp, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = inp[i];
    store_out(out + i, 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x))));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = inp[i];
    const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float local =
        0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += local * dout[i];
  }
}

unsigned row_blocks(int64_t N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}
unsigned col_blocks(int64_t C) {
  return static_cast<unsigned>((C + 31) / 32);
}

}  // namespace

template <class OutT>
void layernorm_forward(OutT* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  launch(layernorm_forward_kernel<OutT>, row_blocks(N), kRowsPerBlock * 32, stream, out, mean, rstd,
         inp, weight, bias, N, C);
  CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}
template void layernorm_forward(float*, float*, float*, const float*, const float*, const float*,
                                int64_t, int64_t, cudaStream_t);
template void layernorm_forward(uint16_t*, float*, float*, const float*, const float*, const float*,
                                int64_t, int64_t, cudaStream_t);

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  if (dinp) {
    launch(layernorm_backward_dinp_kernel, row_blocks(N), kRowsPerBlock * 32, stream, dinp, dout,
           inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH("layernorm_backward_dinp_kernel");
  }
  if (!dweight && !dbias) return;
  launch(layernorm_backward_params_kernel, col_blocks(C), dim3(32, kColLanes), stream, dweight,
         dbias, dout, inp, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH("layernorm_backward_params_kernel");
}

void bias_backward(float* dbias, const float* dout, int64_t N, int64_t OC, cudaStream_t stream) {
  if (OC == 0) return;
  launch(bias_backward_kernel, col_blocks(OC), dim3(32, kColLanes), stream, dbias, dout, N, OC);
  CUDA_CHECK_LAUNCH("bias_backward_kernel");
}

void add_bias(float* out, const float* bias, int64_t N, int64_t OC, cudaStream_t stream) {
  if (N * OC == 0) return;
  launch(add_bias_kernel, grid_for(N * OC), kThreads, stream, out, bias, N, OC);
  CUDA_CHECK_LAUNCH("add_bias_kernel");
}

template <class OutT>
void gelu_forward(OutT* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(gelu_forward_kernel<OutT>, grid_for(n), kThreads, stream, out, inp, n);
  CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}
template void gelu_forward(float*, const float*, int64_t, cudaStream_t);
template void gelu_forward(uint16_t*, const float*, int64_t, cudaStream_t);

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  launch(gelu_backward_kernel, grid_for(n), kThreads, stream, dinp, inp, dout, n);
  CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

}  // namespace trainer::kernels

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

// Column sums over rows (dweight/dbias of layernorm, dbias of a linear layer), deterministic and
// spread over the whole GPU: stage 1 gives every (32 columns, chunk of kChunkRows rows) pair a
// block whose 8 row lanes each sum rows lane, lane+8, ... of the chunk in order, lane 0 adding
// the 8 in order, into partials[chunk][column]; stage 2 sums each column's chunks in order. The
// chunking depends only on N, so every run adds in the same order.
constexpr int kColLanes = 8;
constexpr int64_t kChunkRows = 256;

int64_t row_chunks(int64_t N) {
  return (N + kChunkRows - 1) / kChunkRows;
}

// inp == nullptr: only the plain column sums of dout (a bias gradient, DoutT float or bf16
// bits) into pb.
template <class DoutT>
__global__ void column_partials_kernel(float* pw, float* pb, const DoutT* dout, const float* inp,
                                       const float* mean, const float* rstd, int64_t N, int64_t C) {
  __shared__ float sw[kColLanes][32], sb[kColLanes][32];
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * kChunkRows;
  const int64_t r1 = r0 + kChunkRows < N ? r0 + kChunkRows : N;
  float w = 0, b = 0;
  if (c < C)
    for (int64_t i = r0 + threadIdx.y; i < r1; i += kColLanes) {
      const float dy = load_in(dout + i * C + c);
      if (inp) w += dy * (inp[i * C + c] - mean[i]) * rstd[i];
      b += dy;
    }
  sw[threadIdx.y][threadIdx.x] = w;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int l = 1; l < kColLanes; ++l) w += sw[l][threadIdx.x], b += sb[l][threadIdx.x];
  if (inp) pw[int64_t{blockIdx.y} * C + c] = w;
  pb[int64_t{blockIdx.y} * C + c] = b;
}

// out[c] += sum over chunks k = 0, 1, ... of partials[k][c] (out may be null: not needed).
__global__ void sum_chunks_kernel(float* out, const float* partials, int64_t chunks, int64_t C) {
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (!out || c >= C) return;
  float s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partials[k * C + c];
  out[c] += s;
}

__global__ void add_bias_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < N * OC;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] += bias[i % OC];
}

__device__ inline float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
}

__device__ inline float gelu_derivative(float x) {
  const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

template <class OutT>
__global__ void gelu_forward_kernel(OutT* out, const float* inp, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_out(out + i, gelu(inp[i]));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dinp[i] += gelu_derivative(inp[i]) * dout[i];
}

// out = gelu(sum), pre = sum; for T = float, pre may be sum itself.
template <class T>
__global__ void gelu_forward_keep_input_kernel(T* out, T* pre, const float* sum, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = sum[i];
    store_out(out + i, gelu(x));
    store_out(pre + i, x);
  }
}

// dpre = gelu'(pre) * g; for T = float, g may be dpre itself.
template <class T>
__global__ void gelu_backward_from_sum_kernel(T* dpre, const T* pre, const float* g, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store_out(dpre + i, gelu_derivative(load_in(pre + i)) * g[i]);
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

int64_t column_sums_scratch_floats(int64_t N, int64_t C) {
  return 2 * row_chunks(N) * C;
}

namespace {

// Stage 1 then stage 2 of the column sums; pw/dweight unused when inp is null.
template <class DoutT>
void column_sums(float* dweight, float* dbias, const DoutT* dout, const float* inp,
                 const float* mean, const float* rstd, float* scratch, int64_t N, int64_t C,
                 cudaStream_t stream) {
  const int64_t chunks = row_chunks(N);
  float *pw = scratch, *pb = scratch + chunks * C;
  launch(column_partials_kernel<DoutT>, dim3(col_blocks(C), static_cast<unsigned>(chunks)),
         dim3(32, kColLanes), stream, pw, pb, dout, inp, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH("column_partials_kernel");
  if (inp && dweight) {
    launch(sum_chunks_kernel, grid_for(C), kThreads, stream, dweight, pw, chunks, C);
    CUDA_CHECK_LAUNCH("sum_chunks_kernel");
  }
  if (dbias) {
    launch(sum_chunks_kernel, grid_for(C), kThreads, stream, dbias, pb, chunks, C);
    CUDA_CHECK_LAUNCH("sum_chunks_kernel");
  }
}

}  // namespace

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        float* scratch, int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  if (dinp) {
    launch(layernorm_backward_dinp_kernel, row_blocks(N), kRowsPerBlock * 32, stream, dinp, dout,
           inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH("layernorm_backward_dinp_kernel");
  }
  if (!dweight && !dbias) return;
  column_sums(dweight, dbias, dout, inp, mean, rstd, scratch, N, C, stream);
}

template <class DoutT>
void bias_backward(float* dbias, const DoutT* dout, float* scratch, int64_t N, int64_t OC,
                   cudaStream_t stream) {
  if (OC == 0 || N == 0) return;
  column_sums(nullptr, dbias, dout, nullptr, nullptr, nullptr, scratch, N, OC, stream);
}
template void bias_backward(float*, const float*, float*, int64_t, int64_t, cudaStream_t);
template void bias_backward(float*, const uint16_t*, float*, int64_t, int64_t, cudaStream_t);

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

template <class T>
void gelu_forward_keep_input(T* out, T* pre, const float* sum, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(gelu_forward_keep_input_kernel<T>, grid_for(n), kThreads, stream, out, pre, sum, n);
  CUDA_CHECK_LAUNCH("gelu_forward_keep_input_kernel");
}
template void gelu_forward_keep_input(float*, float*, const float*, int64_t, cudaStream_t);
template void gelu_forward_keep_input(uint16_t*, uint16_t*, const float*, int64_t, cudaStream_t);

template <class T>
void gelu_backward_from_sum(T* dpre, const T* pre, const float* g, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(gelu_backward_from_sum_kernel<T>, grid_for(n), kThreads, stream, dpre, pre, g, n);
  CUDA_CHECK_LAUNCH("gelu_backward_from_sum_kernel");
}
template void gelu_backward_from_sum(float*, const float*, const float*, int64_t, cudaStream_t);
template void gelu_backward_from_sum(uint16_t*, const uint16_t*, const float*, int64_t,
                                     cudaStream_t);

}  // namespace trainer::kernels

// AdamW, scale/axpy, fp64 reductions and bf16 rounding (runtime/cpu/ops_optim.h).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace trainer::kernels {
namespace {

#define GRID_STRIDE(i, n)                                                   \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float bc1,
                             float bc2, float grad_scale, uint16_t* params_bf16) {
  GRID_STRIDE(i, n) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / bc1, vhat = vi / bc2;
    const float p = params[i] - lr * (mhat / (sqrtf(vhat) + eps) + wd * params[i]);
    params[i] = p;
    if (params_bf16) params_bf16[i] = bf16_bits(p);
  }
}

__global__ void fill_kernel(float* x, float value, int64_t n) {
  GRID_STRIDE(i, n) x[i] = value;
}

__global__ void fill_bf16_kernel(uint16_t* x, float value, int64_t n) {
  const uint16_t bits = bf16_bits(value);
  GRID_STRIDE(i, n) x[i] = bits;
}

__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  GRID_STRIDE(i, n) x[i] *= alpha;
}

__global__ void axpy_kernel(float* y, const float* x, float alpha, int64_t n) {
  GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

// Stage 1: kReducePartials blocks, each a grid-stride sum in fp64; stage 2: one block adds them.
__global__ void partial_sums_kernel(double* partials, const float* x, int64_t n, bool squares) {
  __shared__ double red[32];
  double s = 0;
  GRID_STRIDE(i, n) {
    const double a = x[i];
    s += squares ? a * a : a;
  }
  s = block_reduce(s, red, SumOp{}, 0.0);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void final_sum_kernel(double* result, const double* partials) {
  __shared__ double red[32];
  const double s = block_reduce(partials[threadIdx.x], red, SumOp{}, 0.0);
  if (threadIdx.x == 0) *result = s;
}

__global__ void round_bf16_kernel(float* dst, const float* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = from_bf16_bits(bf16_bits(src[i]));
}
__global__ void to_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = bf16_bits(src[i]);
}
__global__ void from_bf16_kernel(float* dst, const uint16_t* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = from_bf16_bits(src[i]);
}

}  // namespace

void adamw_step(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, float bias_correction1,
                float bias_correction2, float grad_scale, uint16_t* params_bf16,
                cudaStream_t stream) {
  if (n == 0) return;
  launch(adamw_kernel, grid_for(n), kThreads, stream, params, grads, m, v, n, lr, beta1, beta2, eps,
         weight_decay, bias_correction1, bias_correction2, grad_scale, params_bf16);
  CUDA_CHECK_LAUNCH("adamw_kernel");
}

void fill(float* x, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(fill_kernel, grid_for(n), kThreads, stream, x, value, n);
  CUDA_CHECK_LAUNCH("fill_kernel");
}

void fill(uint16_t* x, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(fill_bf16_kernel, grid_for(n), kThreads, stream, x, value, n);
  CUDA_CHECK_LAUNCH("fill_bf16_kernel");
}

void scale(float* x, float alpha, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(scale_kernel, grid_for(n), kThreads, stream, x, alpha, n);
  CUDA_CHECK_LAUNCH("scale_kernel");
}

void axpy(float* y, const float* x, float alpha, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(axpy_kernel, grid_for(n), kThreads, stream, y, x, alpha, n);
  CUDA_CHECK_LAUNCH("axpy_kernel");
}

void sum_fp64(double* result, double* partials, const float* x, int64_t n, bool squares,
              cudaStream_t stream) {
  launch(partial_sums_kernel, kReducePartials, kThreads, stream, partials, x, n, squares);
  CUDA_CHECK_LAUNCH("partial_sums_kernel");
  launch(final_sum_kernel, 1, kReducePartials, stream, result, partials);
  CUDA_CHECK_LAUNCH("final_sum_kernel");
}

void round_to_bf16_f32(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(round_bf16_kernel, grid_for(n), kThreads, stream, dst, src, n);
  CUDA_CHECK_LAUNCH("round_bf16_kernel");
}

void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(to_bf16_kernel, grid_for(n), kThreads, stream, dst, src, n);
  CUDA_CHECK_LAUNCH("to_bf16_kernel");
}

void cast_bf16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(from_bf16_kernel, grid_for(n), kThreads, stream, dst, src, n);
  CUDA_CHECK_LAUNCH("from_bf16_kernel");
}

}  // namespace trainer::kernels

// LayerNorm, GELU and bias kernels (GPT-2 numerics, see runtime/cpu/ops_layers.h).
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/vec.cuh"

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

// Layernorm backward: one block per kFusedRows rows, taken a group of `warps` rows at a time.
// Each warp takes one row of the group for the two row means dinp needs (of dnorm and of
// dnorm * norm, as the cpu backend); after a barrier each thread walks its columns c,
// c + blockDim.x, ... down the group's rows, adding to dinp and to the block's dweight and dbias
// partials, its own row of pw, pb [chunk][C]. The group's rows were read a moment before, so the
// second read finds them in the cache: dout and inp come from memory about once, where a dinp
// kernel and a column-sum kernel read them twice. add_column_sums sums the chunks.
constexpr int kFusedRows = 32;
constexpr int kMaxWarps = 32;

int64_t fused_chunks(int64_t N) {
  return (N + kFusedRows - 1) / kFusedRows;
}

__global__ void layernorm_backward_kernel(float* dinp, uint16_t* dinp_bf16, float* pw, float* pb,
                                          const float* dout, const float* inp, const float* weight,
                                          const float* mean, const float* rstd, int64_t N,
                                          int64_t C) {
  __shared__ float row_mean[kMaxWarps], row_rstd[kMaxWarps];
  __shared__ float row_dnorm_mean[kMaxWarps], row_dnorm_norm_mean[kMaxWarps];
  const int64_t r0 = int64_t{blockIdx.x} * kFusedRows;
  const int rows = static_cast<int>(N - r0 < kFusedRows ? N - r0 : kFusedRows);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float *block_dw = pw + int64_t{blockIdx.x} * C, *block_db = pb + int64_t{blockIdx.x} * C;
  for (int g = 0; g < rows; g += warps) {
    const int n = rows - g < warps ? rows - g : warps;
    if (warp < n) {
      const int64_t i = r0 + g + warp;
      const float *x = inp + i * C, *dy = dout + i * C;
      const float m = mean[i], s = rstd[i];
      float dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int64_t c = lane; c < C; c += 32) {
        const float dnorm = weight[c] * dy[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * (x[c] - m) * s;
      }
      dnorm_mean = warp_sum(dnorm_mean) / float(C);
      dnorm_norm_mean = warp_sum(dnorm_norm_mean) / float(C);
      if (lane == 0) {
        row_mean[warp] = m, row_rstd[warp] = s;
        row_dnorm_mean[warp] = dnorm_mean, row_dnorm_norm_mean[warp] = dnorm_norm_mean;
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float w = weight[c];
      float dw = g == 0 ? 0.0f : block_dw[c], db = g == 0 ? 0.0f : block_db[c];  // own columns
      for (int r = 0; r < n; ++r) {
        const int64_t e = (r0 + g + r) * C + c;
        const float dy = dout[e], xm = inp[e] - row_mean[r], s = row_rstd[r];
        if (dinp) {
          const float d =
              dinp[e] + (w * dy - row_dnorm_mean[r] - xm * s * row_dnorm_norm_mean[r]) * s;
          dinp[e] = d;
          if (dinp_bf16) dinp_bf16[e] = bf16_bits(d);
        }
        dw += dy * xm * s;
        db += dy;
      }
      block_dw[c] = dw;
      block_db[c] = db;
    }
    __syncthreads();  // the next group's means overwrite these
  }
}

// ---- Rows held in registers: C = 128 * kVec columns, kVec <= kRowVec (GPT-2's widths, 768 and
// 1024, among them), every pointer 16-byte aligned. Lane l holds columns 4 (l + 32 i) .. + 3 of
// its row for i < kVec, read in 16-byte accesses, so each input element comes from memory once
// and no pass waits at a barrier; the kernels above serve every other shape.
constexpr int kRowVec = 8;
// The backward's warps per block: at 768 columns it takes 156 registers, and an SM 3 blocks.
constexpr int kRowWarps = 4;

bool rows_fit_registers(int64_t C, std::initializer_list<const void*> pointers) {
  if (C % 128 != 0 || C / 128 > kRowVec) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;  // (null is aligned)
  return true;
}

// f(std::integral_constant<int, C / 128>) for C that rows_fit_registers took.
template <int kVec = 1, class F>
void with_row_vec(int64_t C, F&& f) {
  if constexpr (kVec <= kRowVec) {
    if (C == 128 * kVec)
      f(std::integral_constant<int, kVec>{});
    else
      with_row_vec<kVec + 1>(C, f);
  }
}

__device__ inline void store4(float* p, const float (&f)[4]) {
  store_floats4(p, f);
}
__device__ inline void store4(uint16_t* p, const float (&f)[4]) {  // rounded as store_out
  const uint32_t w[2] = {bf16_bits(f[0]) | static_cast<uint32_t>(bf16_bits(f[1])) << 16,
                         bf16_bits(f[2]) | static_cast<uint32_t>(bf16_bits(f[3])) << 16};
  store8(p, w);
}

// The forward of layernorm_forward_kernel (one warp per row, the same two-pass mean and variance)
// from registers.
template <int kVec, class OutT>
__global__ void layernorm_forward_rows_kernel(OutT* out, float* mean, float* rstd, const float* inp,
                                              const float* weight, const float* bias, int64_t N) {
  constexpr int64_t C = 128 * kVec;
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  float x[kVec][4];
  for (int i = 0; i < kVec; ++i) load_floats4(x[i], inp + row * C + 4 * (lane + 32 * i));
  float s = 0;
  for (int i = 0; i < kVec; ++i)
    for (int k = 0; k < 4; ++k) s += x[i][k];
  const float m = warp_sum(s) / float(C);
  float var = 0;
  for (int i = 0; i < kVec; ++i)
    for (int k = 0; k < 4; ++k) var += (x[i][k] - m) * (x[i][k] - m);
  const float r = 1.0f / sqrtf(warp_sum(var) / float(C) + kEps);
  for (int i = 0; i < kVec; ++i) {
    const int64_t c = 4 * (lane + 32 * i);
    float w[4], b[4] = {0.0f, 0.0f, 0.0f, 0.0f}, y[4];
    load_floats4(w, weight + c);
    if (bias) load_floats4(b, bias + c);
    for (int k = 0; k < 4; ++k) y[k] = (x[i][k] - m) * r * w[k] + b[k];
    store4(out + row * C + c, y);
  }
  if (lane == 0 && mean) mean[row] = m;
  if (lane == 0 && rstd) rstd[row] = r;
}

// The backward of layernorm_backward_kernel from registers: one block per kFusedRows rows (the
// same chunks, so the same partials pw, pb [chunk][C] and column sums), warp w taking rows w,
// w + warps, ... of its chunk. A lane keeps its columns' weight in registers, and loads all of a
// row (dout, input and dinp) at once: one trip to memory a row. Its dweight and dbias sums live
// in its warp's rows of shared memory (in registers they would cost 48 more at C 768, and an SM
// a block); the warps' rows are then added in warp order (fixed: deterministic).
template <int kVec>
__global__ void __launch_bounds__(kRowWarps * 32)
    layernorm_backward_rows_kernel(float* dinp, uint16_t* dinp_bf16, float* pw, float* pb,
                                   const float* dout, const float* inp, const float* weight,
                                   const float* mean, const float* rstd, int64_t N) {
  constexpr int64_t C = 128 * kVec;
  __shared__ __align__(16) float sum_w[kRowWarps][C];  // each warp's dweight sums
  __shared__ __align__(16) float sum_b[kRowWarps][C];
  const int64_t r0 = int64_t{blockIdx.x} * kFusedRows;
  const int64_t r1 = r0 + kFusedRows < N ? r0 + kFusedRows : N;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* dw = sum_w[warp];
  float* db = sum_b[warp];
  float w[kVec][4];
  for (int i = 0; i < kVec; ++i) {
    const int c = 4 * (lane + 32 * i);
    load_floats4(w[i], weight + c);
    for (int k = 0; k < 4; ++k) dw[c + k] = db[c + k] = 0.0f;
  }
  for (int64_t row = r0 + warp; row < r1; row += kRowWarps) {
    // dout, the normalised input, and the gradient to add to: every load of the row at once (dinp's
    // loads do not wait for the row's sums).
    float dy[kVec][4], xh[kVec][4], d[kVec][4];
    for (int i = 0; i < kVec; ++i) {
      load_floats4(dy[i], dout + row * C + 4 * (lane + 32 * i));
      load_floats4(xh[i], inp + row * C + 4 * (lane + 32 * i));
      if (dinp) load_floats4(d[i], dinp + row * C + 4 * (lane + 32 * i));
    }
    const float m = mean[row], s = rstd[row];
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int i = 0; i < kVec; ++i)
      for (int k = 0; k < 4; ++k) {
        xh[i][k] = (xh[i][k] - m) * s;
        const float dnorm = w[i][k] * dy[i][k];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * xh[i][k];
      }
    dnorm_mean = warp_sum(dnorm_mean) / float(C);
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / float(C);
    for (int i = 0; i < kVec; ++i) {
      const int64_t e = row * C + 4 * (lane + 32 * i);
      if (dinp) {
        for (int k = 0; k < 4; ++k)
          d[i][k] += (w[i][k] * dy[i][k] - dnorm_mean - xh[i][k] * dnorm_norm_mean) * s;
        store4(dinp + e, d[i]);
        if (dinp_bf16) store4(dinp_bf16 + e, d[i]);
      }
      const int c = 4 * (lane + 32 * i);  // this lane's own slots: no other thread touches them
      float aw[4], ab[4];
      load_floats4(aw, dw + c);
      load_floats4(ab, db + c);
      for (int k = 0; k < 4; ++k) {
        aw[k] += dy[i][k] * xh[i][k];
        ab[k] += dy[i][k];
      }
      store_floats4(dw + c, aw);
      store_floats4(db + c, ab);
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float tw = 0.0f, tb = 0.0f;
    for (int v = 0; v < kRowWarps; ++v) tw += sum_w[v][c], tb += sum_b[v][c];
    pw[int64_t{blockIdx.x} * C + c] = tw;
    pb[int64_t{blockIdx.x} * C + c] = tb;
  }
}

// Column sums over rows (dbias of a linear layer), deterministic and spread over the whole GPU:
// stage 1 gives every (32 columns, chunk of kChunkRows rows) pair a block whose 8 row lanes each
// sum rows lane, lane+8, ... of the chunk in order, lane 0 adding the 8 in order, into
// partials[chunk][column]; stage 2 sums each column's chunks in order. The chunking depends only
// on N, so every run adds in the same order.
constexpr int kColLanes = 8;
constexpr int64_t kChunkRows = 256;

int64_t row_chunks(int64_t N) {
  return (N + kChunkRows - 1) / kChunkRows;
}

// The column sums of dout (DoutT float or bf16 bits) into pb[chunk][column]; with one chunk
// (gridDim.y 1) and `out`, added to out[column] instead (stage 2 would only copy them there).
template <class DoutT>
__global__ void column_partials_kernel(float* pb, float* out, const DoutT* dout, int64_t N,
                                       int64_t C) {
  __shared__ float sb[kColLanes][32];
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * kChunkRows;
  const int64_t r1 = r0 + kChunkRows < N ? r0 + kChunkRows : N;
  float b = 0;
  if (c < C)
    for (int64_t i = r0 + threadIdx.y; i < r1; i += kColLanes) b += load_in(dout + i * C + c);
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int l = 1; l < kColLanes; ++l) b += sb[l][threadIdx.x];
  if (out)
    out[c] += b;
  else
    pb[int64_t{blockIdx.y} * C + c] = b;
}

// out[c] += sum over chunks k = 0, 1, ... of partials[k][c].
__global__ void sum_chunks_kernel(float* out, const float* partials, int64_t chunks, int64_t C) {
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partials[k * C + c];
  out[c] += s;
}

// out[r][c] += bias[c]: a thread takes 4 columns (16-byte accesses where OC is a multiple of 4
// and both pointers 16-byte aligned) of every gridDim.y-th row; no index division per element.
__global__ void add_bias_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  const int64_t c = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * 4;
  if (c >= OC) return;
  const bool vec = OC % 4 == 0 && aligned16(out) && aligned16(bias);
  const int cols = OC - c < 4 ? static_cast<int>(OC - c) : 4;
  float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k = 0; k < cols; ++k) b[k] = bias[c + k];
  for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
    float* y = out + r * OC + c;
    if (vec) {
      float v[4];
      load_floats4(v, y);
      for (int k = 0; k < 4; ++k) v[k] += b[k];
      store_floats4(y, v);
    } else {
      for (int k = 0; k < cols; ++k) y[k] += b[k];
    }
  }
}

// GPT-2's tanh GELU as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the cpu backend's form
// (runtime/cpu/ops_layers.h), free of the cancellation in 1 + tanh(u) for negative x.
__device__ inline float gelu_exp(float x) {
  return expf(-2.0f * kGeluScale * (x + kGeluCubic * x * x * x));
}

__device__ inline float gelu(float x) {
  return x / (1.0f + gelu_exp(x));
}

__device__ inline float gelu_derivative(float x) {
  const float sig = 1.0f / (1.0f + gelu_exp(x));
  return sig + x * sig * (1.0f - sig) * 2.0f * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
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
  if (rows_fit_registers(C, {out, inp, weight, bias})) {
    with_row_vec(C, [&](auto vec) {
      launch(layernorm_forward_rows_kernel<decltype(vec)::value, OutT>, row_blocks(N),
             kRowsPerBlock * 32, stream, out, mean, rstd, inp, weight, bias, N);
      CUDA_CHECK_LAUNCH("layernorm_forward_rows_kernel");
    });
    return;
  }
  launch(layernorm_forward_kernel<OutT>, row_blocks(N), kRowsPerBlock * 32, stream, out, mean, rstd,
         inp, weight, bias, N, C);
  CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}
template void layernorm_forward(float*, float*, float*, const float*, const float*, const float*,
                                int64_t, int64_t, cudaStream_t);
template void layernorm_forward(uint16_t*, float*, float*, const float*, const float*, const float*,
                                int64_t, int64_t, cudaStream_t);

int64_t column_sums_scratch_floats(int64_t N, int64_t C) {
  // layernorm_backward: pw, pb [fused_chunks][C], then their column sums by groups of chunks;
  // bias_backward: [row_chunks][C]
  const int64_t chunks = fused_chunks(N), layernorm = 2 * (chunks + row_chunks(chunks)) * C;
  return layernorm > row_chunks(N) * C ? layernorm : row_chunks(N) * C;
}

namespace {

// out (may be null) += the sum over `chunks` of partials[chunk][C], chunks in order.
void sum_chunks(float* out, const float* partials, int64_t chunks, int64_t C, cudaStream_t stream) {
  if (!out) return;
  launch(sum_chunks_kernel, grid_for(C), kThreads, stream, out, partials, chunks, C);
  CUDA_CHECK_LAUNCH("sum_chunks_kernel");
}

// out (may be null) += the column sums of rows[N][C], in a fixed order and spread over the GPU:
// by chunks of kChunkRows rows into partials [row_chunks(N)][C], then those chunks in order (a
// single chunk goes straight into out).
template <class T>
void add_column_sums(float* out, const T* rows, float* partials, int64_t N, int64_t C,
                     cudaStream_t stream) {
  if (!out) return;
  const int64_t chunks = row_chunks(N);
  launch(column_partials_kernel<T>, dim3(col_blocks(C), static_cast<unsigned>(chunks)),
         dim3(32, kColLanes), stream, partials, chunks == 1 ? out : nullptr, rows, N, C);
  CUDA_CHECK_LAUNCH("column_partials_kernel");
  if (chunks > 1) sum_chunks(out, partials, chunks, C, stream);
}

}  // namespace

void layernorm_backward(float* dinp, uint16_t* dinp_bf16, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, float* scratch, int64_t N, int64_t C,
                        cudaStream_t stream) {
  if (N == 0 || C == 0 || (!dinp && !dweight && !dbias)) return;
  const int64_t chunks = fused_chunks(N), groups = row_chunks(chunks);
  float *pw = scratch, *pb = pw + chunks * C, *staging_w = pb + chunks * C;
  float* staging_b = staging_w + groups * C;
  if (rows_fit_registers(C, {dinp, dinp_bf16, dout, inp, weight})) {
    with_row_vec(C, [&](auto vec) {
      launch(layernorm_backward_rows_kernel<decltype(vec)::value>, static_cast<unsigned>(chunks),
             kRowWarps * 32, stream, dinp, dinp_bf16, pw, pb, dout, inp, weight, mean, rstd, N);
      CUDA_CHECK_LAUNCH("layernorm_backward_rows_kernel");
    });
  } else {
    launch(layernorm_backward_kernel, static_cast<unsigned>(chunks), kThreads, stream, dinp,
           dinp_bf16, pw, pb, dout, inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH("layernorm_backward_kernel");
  }
  add_column_sums(dweight, pw, staging_w, chunks, C, stream);  // the chunks' partials, summed
  add_column_sums(dbias, pb, staging_b, chunks, C, stream);
}

template <class DoutT>
void bias_backward(float* dbias, const DoutT* dout, float* scratch, int64_t N, int64_t OC,
                   cudaStream_t stream) {
  if (OC == 0 || N == 0) return;
  add_column_sums(dbias, dout, scratch, N, OC, stream);
}
template void bias_backward(float*, const float*, float*, int64_t, int64_t, cudaStream_t);
template void bias_backward(float*, const uint16_t*, float*, int64_t, int64_t, cudaStream_t);

void add_bias(float* out, const float* bias, int64_t N, int64_t OC, cudaStream_t stream) {
  if (N * OC == 0) return;
  const int64_t row_blocks = N < 1024 ? N : 1024;  // each thread then walks N / 1024 rows
  launch(add_bias_kernel, dim3(grid_for((OC + 3) / 4), static_cast<unsigned>(row_blocks)), kThreads,
         stream, out, bias, N, OC);
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

// Token + position embedding, forward and a deterministic backward (no float atomics): the
// positions are bucketed by token (counts, a scan, integer atomics), each bucket put in position
// order, then each (token, column) sums its rows in that order and adds the sum to dwte. The cpu
// reference adds each row to dwte in the same order: equal where dwte starts at zero, within the
// last bits where it already holds a gradient (the tied head's, an earlier micro-batch's).
// Every step is O(BT) but the bucket sort's, O(BT x mean bucket size): a batch that is mostly
// one token (a constant stream, long padding runs) makes it O(BT^2).
#include <cmath>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace trainer::kernels {
namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                         const float* wpe, int64_t pos_offset, int64_t BT,
                                         int64_t T, int64_t C, int64_t V) {
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < BT * C;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / C, c = idx % C;
    const int64_t tok = tokens[i];
    if (tok >= V) {
      out[idx] = NAN;  // visible downstream as a non-finite loss, never an out-of-bounds read
      continue;
    }
    // (a negative token has no row here: another vocabulary shard's)
    out[idx] =
        (tok >= 0 ? wte[tok * C + c] : 0.0f) + (wpe ? wpe[(pos_offset + i % T) * C + c] : 0.0f);
  }
}

// counts[v] = number of positions holding token v (integer atomics: the sum is exact whatever
// the order). Tokens outside [0, V) belong to no bucket (no row here, or a NaN forward).
__global__ void count_tokens_kernel(int32_t* counts, const int32_t* tokens, int64_t BT, int64_t V) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < BT;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t tok = tokens[i];
    if (tok >= 0 && tok < V) atomicAdd(&counts[tok], 1);
  }
}

// offsets[0] = 0, offsets[v+1] = offsets[v] + counts[v]; one block of kScanThreads.
constexpr int kScanThreads = 1024;
__global__ void exclusive_scan_kernel(int32_t* offsets, const int32_t* counts, int64_t V) {
  __shared__ int32_t partial[kScanThreads];
  const int64_t chunk = (V + kScanThreads - 1) / kScanThreads;
  const int64_t begin = threadIdx.x * chunk, end = begin + chunk < V ? begin + chunk : V;
  int32_t s = 0;
  for (int64_t v = begin; v < end; ++v) s += counts[v];
  partial[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int j = 0; j < kScanThreads; ++j) {
      const int32_t p = partial[j];
      partial[j] = run;
      run += p;
    }
    offsets[0] = 0;
  }
  __syncthreads();
  int32_t run = partial[threadIdx.x];
  for (int64_t v = begin; v < end; ++v) offsets[v + 1] = (run += counts[v]);
}

// Each position into its token's bucket, bucketed[offsets[v] ...], in whatever order the
// atomics give (counts[] counts down to 0 on the way).
__global__ void bucket_positions_kernel(int32_t* bucketed, int32_t* counts, const int32_t* offsets,
                                        const int32_t* tokens, int64_t BT, int64_t V) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < BT;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t tok = tokens[i];
    if (tok >= 0 && tok < V)
      bucketed[offsets[tok] + atomicSub(&counts[tok], 1) - 1] = static_cast<int32_t>(i);
  }
}

// sorted[] = bucketed[] with each bucket ascending: a position's place is the number of smaller
// positions in its bucket (distinct positions: distinct places). Work: the sum over tokens of
// their count squared, BT x the mean count (BT^2 only if every position held one token).
__global__ void sort_buckets_kernel(int32_t* sorted, const int32_t* bucketed,
                                    const int32_t* offsets, const int32_t* tokens, int64_t BT,
                                    int64_t V) {
  const int64_t filled = offsets[V];
  for (int64_t s = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; s < filled && s < BT;
       s += int64_t{gridDim.x} * blockDim.x) {
    const int32_t p = bucketed[s], begin = offsets[tokens[p]], end = offsets[tokens[p] + 1];
    int32_t rank = 0;
    for (int32_t j = begin; j < end; ++j) rank += bucketed[j] < p;
    sorted[begin + rank] = p;
  }
}

// One block per (bucket start in sorted order, 128 columns): the bucket's token's row gets the
// sum of its positions' rows, summed in position order (the cpu reference's order).
__global__ void accumulate_dwte_kernel(float* dwte, const float* dout, const int32_t* offsets,
                                       const int32_t* sorted, const int32_t* tokens, int64_t C,
                                       int64_t V) {
  const int64_t s = blockIdx.x, c = int64_t{blockIdx.y} * blockDim.x + threadIdx.x;
  if (c >= C || s >= offsets[V]) return;
  const int32_t v = tokens[sorted[s]], begin = offsets[v], end = offsets[v + 1];
  if (s != begin) return;  // not the first of its bucket
  float g = 0;
  for (int32_t j = begin; j < end; ++j) g += dout[int64_t{sorted[j]} * C + c];
  dwte[v * C + c] += g;
}

__global__ void accumulate_dwpe_kernel(float* dwpe, const float* dout, int64_t pos_offset,
                                       int64_t B, int64_t T, int64_t C) {
  // grid-stride: grid_for caps the grid
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < T * C;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / C, c = idx % C;
    float g = 0;
    for (int64_t b = 0; b < B; ++b) g += dout[(b * T + t) * C + c];
    dwpe[(pos_offset + t) * C + c] += g;
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t pos_offset, int64_t B, int64_t T, int64_t C, int64_t V,
                       cudaStream_t stream) {
  if (B * T * C == 0) return;
  launch(embedding_forward_kernel, grid_for(B * T * C), kThreads, stream, out, tokens, wte, wpe,
         pos_offset, B * T, T, C, V);
  CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

int64_t embedding_backward_scratch_ints(int64_t BT, int64_t V) {
  return 2 * V + 1 + 2 * BT;  // counts[V] | offsets[V+1] | bucketed[BT] | sorted[BT]
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int32_t* scratch, int64_t pos_offset, int64_t B, int64_t T, int64_t C,
                        int64_t V, cudaStream_t stream) {
  const int64_t BT = B * T;
  if (BT * C == 0) return;
  if (dwte) {
    int32_t *counts = scratch, *offsets = scratch + V, *bucketed = scratch + 2 * V + 1,
            *sorted = bucketed + BT;
    zero_bytes(counts, static_cast<size_t>(V) * sizeof(int32_t), stream);
    launch(count_tokens_kernel, grid_for(BT), kThreads, stream, counts, tokens, BT, V);
    CUDA_CHECK_LAUNCH("count_tokens_kernel");
    launch(exclusive_scan_kernel, 1, kScanThreads, stream, offsets, counts, V);
    CUDA_CHECK_LAUNCH("exclusive_scan_kernel");
    launch(bucket_positions_kernel, grid_for(BT), kThreads, stream, bucketed, counts, offsets,
           tokens, BT, V);
    CUDA_CHECK_LAUNCH("bucket_positions_kernel");
    launch(sort_buckets_kernel, grid_for(BT), kThreads, stream, sorted, bucketed, offsets, tokens,
           BT, V);
    CUDA_CHECK_LAUNCH("sort_buckets_kernel");
    const dim3 grid(static_cast<unsigned>(BT), static_cast<unsigned>((C + 127) / 128));
    launch(accumulate_dwte_kernel, grid, 128, stream, dwte, dout, offsets, sorted, tokens, C, V);
    CUDA_CHECK_LAUNCH("accumulate_dwte_kernel");
  }
  if (dwpe) {
    launch(accumulate_dwpe_kernel, grid_for(T * C), kThreads, stream, dwpe, dout, pos_offset, B, T,
           C);
    CUDA_CHECK_LAUNCH("accumulate_dwpe_kernel");
  }
}

}  // namespace trainer::kernels

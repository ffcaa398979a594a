#pragma once
// Runs CUDA device code on the cpu, so kernels can be tested where there is no GPU: each thread
// of a block is a std::thread, __syncthreads() is a std::barrier, and blocks run one after
// another, so a __shared__ array can be a function-local static shared by the block's threads.
// Enough for kernels that use shared memory and __syncthreads() only (no warp shuffles, atomics,
// dynamic shared memory or streams): include this, then the kernel's .cuh of device code.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace cuda_emulation {
inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local std::barrier<>* block_barrier = nullptr;

// Runs kernel() as grid x block threads; the kernel reads threadIdx, blockIdx, blockDim, gridDim.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  const unsigned threads = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> sync(static_cast<std::ptrdiff_t>(threads));
        std::vector<std::jthread> pool;
        for (unsigned t = 0; t < threads; ++t)
          pool.emplace_back([&, t] {
            thread_idx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
            block_idx = dim3(bx, by, bz);
            block_dim = block;
            grid_dim = grid;
            block_barrier = &sync;
            kernel();
            // A thread that returns early no longer takes part in later barriers.
            sync.arrive_and_drop();
          });
      }
}
}  // namespace cuda_emulation

#define threadIdx (::cuda_emulation::thread_idx)
#define blockIdx (::cuda_emulation::block_idx)
#define blockDim (::cuda_emulation::block_dim)
#define gridDim (::cuda_emulation::grid_dim)
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(n)
#define __align__(n)

inline void __syncthreads() {
  ::cuda_emulation::block_barrier->arrive_and_wait();
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

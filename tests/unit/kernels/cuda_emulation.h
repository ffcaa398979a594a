#pragma once
// Runs CUDA device code on the cpu, so the kernels are tested where there is no GPU: each thread
// of a block is a std::thread, __syncthreads() is a std::barrier over the block and
// __shfl_xor_sync() an exchange through a barrier over the warp (32 consecutive threads); blocks
// run one after another, so a __shared__ array can be a function-local static. Covers what
// kernels/ uses: shared memory, __syncthreads, xor shuffles, grid-stride loops (no atomics,
// dynamic shared memory or streams). Define TRAINER_CUDA_EMULATION, include this, then a kernel
// source (kernels/common.cuh's launch() then runs here; CUDA_CHECK_LAUNCH does nothing).
#include <algorithm>
#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

using cudaStream_t = struct EmulatedStream*;
#define CUDA_CHECK_LAUNCH(name) ((void)(name))

namespace cuda_emulation {

struct Warp {
  explicit Warp(std::ptrdiff_t lanes) : sync(lanes) {}
  std::barrier<> sync;
  std::array<uint64_t, 32> slot{};  // one value per lane (up to 8 bytes)
};

inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local std::barrier<>* block_barrier = nullptr;
inline thread_local Warp* warp = nullptr;
inline thread_local unsigned lane = 0;

// One block's barriers: fresh for every block, because a thread that returns early drops out of
// them for the rest of its block (as an exited CUDA thread no longer counts at __syncthreads).
struct BlockState {
  explicit BlockState(unsigned threads) : sync(static_cast<std::ptrdiff_t>(threads)) {
    for (unsigned w = 0; w * 32 < threads; ++w)
      warps.push_back(std::make_unique<Warp>(std::min(32u, threads - w * 32)));
  }
  std::barrier<> sync;
  std::vector<std::unique_ptr<Warp>> warps;
};

// Runs kernel() over grid x block: block.x * block.y * block.z std::threads, created once, run
// every block in turn (the next block starts when all threads have finished this one).
inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  const unsigned threads = block.x * block.y * block.z;
  const unsigned blocks = grid.x * grid.y * grid.z;
  auto state = std::make_unique<BlockState>(threads);
  auto next_block = [&]() noexcept { state = std::make_unique<BlockState>(threads); };
  std::barrier<decltype(next_block)> block_done(static_cast<std::ptrdiff_t>(threads), next_block);
  std::vector<std::jthread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      thread_idx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
      block_dim = block;
      grid_dim = grid;
      lane = t % 32;
      for (unsigned b = 0; b < blocks; ++b) {
        block_idx = dim3(b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y));
        block_barrier = &state->sync;
        warp = state->warps[t / 32].get();
        kernel();
        // A thread that has returned no longer takes part in this block's barriers.
        warp->sync.arrive_and_drop();
        block_barrier->arrive_and_drop();
        block_done.arrive_and_wait();
      }
    });
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
// Lane i gets lane (i ^ offset)'s value; every lane of the warp must take part (mask ignored).
template <class T>
T __shfl_xor_sync(unsigned /*mask*/, T value, int offset) {
  static_assert(sizeof(T) <= 8);
  auto& w = *::cuda_emulation::warp;
  const unsigned me = ::cuda_emulation::lane;
  std::memcpy(&w.slot[me], &value, sizeof(T));
  w.sync.arrive_and_wait();
  T got;
  std::memcpy(&got, &w.slot[me ^ static_cast<unsigned>(offset)], sizeof(T));
  w.sync.arrive_and_wait();  // nobody overwrites a slot before every lane has read
  return got;
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

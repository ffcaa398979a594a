// The cpu emulation of CUDA (cuda_emulation.h) that the kernel tests run on: its barriers, with
// threads that return early and a partial last warp, its xor shuffles, and, where the threads of
// a block are fibers (every build but the sanitizers'), that a read lacking a barrier is seen
// (in block order, in reverse, and with the warps drifting apart in shuffled blocks),
// that a barrier not every thread reaches throws instead of hanging, and that a kernel's
// exception reaches the launch.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <vector>

#include "tests/unit/kernels/emulated.h"

namespace {

constexpr int kThreads = 80;  // two warps and a partial one of 16

bool returns_early(int t) {
  return t % 7 == 0 || t == kThreads - 1;
}

// Each thread reads its neighbours' writes across barriers; one in seven and the last return
// after the first read, and the barriers after it complete without them. The partial warp meets
// at a barrier of its own first, so that in thread order the last thread returns after all others
// arrived at the next block barrier: its leaving completes that barrier.
__global__ void neighbours_kernel(int* out) {
  __shared__ int seen[kThreads];
  const int t = static_cast<int>(threadIdx.x), block = static_cast<int>(blockIdx.x);
  seen[t] = 1000 * block + t;
  __syncthreads();
  const int first = seen[(t + 1) % kThreads];
  if (t >= 64) __syncwarp();  // the partial warp
  if (returns_early(t)) {
    out[block * kThreads + t] = first;
    return;
  }
  __syncthreads();  // every first read done before the second writes
  seen[t] = 100000 + 1000 * block + t;
  __syncthreads();
  out[block * kThreads + t] = first + seen[(t + 3) % kThreads];
}

int expected_neighbours(int block, int t) {
  const int first = 1000 * block + (t + 1) % kThreads;
  if (returns_early(t)) return first;
  const int u = (t + 3) % kThreads;
  return first + (returns_early(u) ? 1000 * block + u : 100000 + 1000 * block + u);
}

// The sum of the warp's lane numbers, by xor shuffles, in every lane.
__global__ void warp_sum_kernel(int* out) {
  int v = static_cast<int>(threadIdx.x % 32);
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

}  // namespace

TEST_CASE("emulated_barriers_order_the_threads_of_each_block", "[kernels][emulation]") {
  const int blocks = 3;
  std::vector<int> out(blocks * kThreads, -1);
  int* o = out.data();
  cuda_emulation::launch(dim3(blocks), dim3(kThreads), [&] { neighbours_kernel(o); });
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < kThreads; ++t) {
      INFO("block " << b << " thread " << t);
      CHECK(out[static_cast<size_t>(b * kThreads + t)] == expected_neighbours(b, t));
    }
}

TEST_CASE("emulated_xor_shuffles_exchange_within_each_warp", "[kernels][emulation]") {
  std::vector<int> out(96, -1);
  int* o = out.data();
  cuda_emulation::launch(dim3(1), dim3(96), [&] { warp_sum_kernel(o); });
  for (int v : out) CHECK(v == 31 * 32 / 2);
}

#ifndef TRAINER_EMULATION_THREADS
namespace {

// Reads the previous thread's write with no barrier between.
__global__ void missing_barrier_kernel(int* out) {
  __shared__ int seen[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  seen[t] = 1000 * static_cast<int>(blockIdx.x) + t;
  out[blockIdx.x * kThreads + t] = seen[t > 0 ? t - 1 : 0];
}

// Reads the other warp's write after an exchange within the own warp, then after a block barrier.
__global__ void warp_ahead_kernel(int* before, int* after) {
  __shared__ int seen[64];
  const int t = static_cast<int>(threadIdx.x);
  seen[t] = 1000 * static_cast<int>(blockIdx.x) + t + 1;
  (void)__shfl_xor_sync(0xffffffffu, t, 1);
  before[blockIdx.x * 64 + t] = seen[(t + 32) % 64];
  __syncthreads();
  after[blockIdx.x * 64 + t] = seen[(t + 32) % 64];
}

// Lane 0 waits at the warp's barrier, the other threads at the block's: neither completes.
__global__ void split_barrier_kernel() {
  if (threadIdx.x == 0)
    __syncwarp();
  else
    __syncthreads();
}

// Two warps, each writing then reading its own slots of shared memory round after round (a warp
// barrier between); then, with no block barrier, each writes -1 over the other warp's slots. A
// read is stale when the other warp got there first: never where one warp runs all its rounds
// before the other starts (the ordered blocks), but where the warps drift apart (shuffled).
constexpr int kRounds = 8;
__global__ void overwrite_while_read_kernel(int* stale) {
  __shared__ int slots[64];
  const int t = static_cast<int>(threadIdx.x);
  for (int round = 0; round < kRounds; ++round) {
    slots[t] = round;
    __syncwarp();
    stale[blockIdx.x * 64 + t] += slots[t ^ 1] != round;
    __syncwarp();
  }
  slots[(t + 32) % 64] = -1;  // a __syncthreads() missing before this
}

__global__ void throwing_kernel(int* out) {
  __syncthreads();
  if (threadIdx.x == 5) throw std::runtime_error("thread 5 gives up");
  __syncthreads();
  out[threadIdx.x] = 1;
}

}  // namespace

TEST_CASE("emulated_fibers_show_a_read_without_a_barrier_in_one_of_two_blocks",
          "[kernels][emulation]") {
  // Block 0 runs its threads in order (each reads after the previous one wrote), block 1 in
  // reverse (each reads before it wrote): the second block's reads are stale.
  std::vector<int> out(2 * kThreads, -1);
  int* o = out.data();
  cuda_emulation::launch(dim3(2), dim3(kThreads), [&] { missing_barrier_kernel(o); });
  int stale[2] = {0, 0};
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < kThreads; ++t)
      stale[b] += out[static_cast<size_t>(b * kThreads + t)] != 1000 * b + (t > 0 ? t - 1 : 0);
  CHECK(stale[0] == 0);
  CHECK(stale[1] == kThreads - 1);
}

TEST_CASE("emulated_fibers_let_a_warp_run_ahead_of_the_next_up_to_a_block_barrier",
          "[kernels][emulation]") {
  // Warp 0 of block 0 (warp 1 of block 1) passes its exchange and reads before the other warp
  // has started; after the block barrier every read is fresh.
  std::vector<int> before(128, -1), after(128, -1);
  int *b0 = before.data(), *a0 = after.data();
  cuda_emulation::launch(dim3(2), dim3(64), [&] { warp_ahead_kernel(b0, a0); });
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 64; ++t) {
      INFO("block " << b << " thread " << t);
      const size_t i = static_cast<size_t>(b * 64 + t);
      const int fresh = 1000 * b + (t + 32) % 64 + 1;
      const bool first_warp = t / 32 == b;  // the warp that runs first in this block's order
      CHECK((before[i] == fresh) == !first_warp);
      CHECK(after[i] == fresh);
    }
}

TEST_CASE("emulated_fibers_let_warps_drift_apart_in_every_third_block", "[kernels][emulation]") {
  // Blocks 2, 5, 8, ... shuffle: a warp that finishes early overwrites what the other warp has
  // yet to read, in some of them (pseudo-random, but the same every run).
  constexpr int kBlocks = 30;
  std::vector<int> stale(kBlocks * 64, 0);
  int* s = stale.data();
  cuda_emulation::launch(dim3(kBlocks), dim3(64), [&] { overwrite_while_read_kernel(s); });
  int stale_shuffled = 0;
  for (int b = 0; b < kBlocks; ++b) {
    int n = 0;
    for (int t = 0; t < 64; ++t) n += stale[static_cast<size_t>(b * 64 + t)];
    INFO("block " << b << ": " << n << " stale reads");
    if (b % 3 == 2)
      stale_shuffled += n;
    else
      CHECK(n == 0);
  }
  CHECK(stale_shuffled > 0);
}

TEST_CASE("emulated_fibers_throw_on_a_barrier_that_cannot_complete", "[kernels][emulation]") {
  CHECK_THROWS_WITH(
      cuda_emulation::launch(dim3(1), dim3(64), [] { split_barrier_kernel(); }),
      Catch::Contains("every thread left in the block waits at a barrier that cannot complete"));
  // The next launch runs as usual.
  std::vector<int> out(96, -1);
  int* o = out.data();
  cuda_emulation::launch(dim3(1), dim3(96), [&] { warp_sum_kernel(o); });
  CHECK(out[95] == 31 * 32 / 2);
}

TEST_CASE("emulated_fibers_pass_a_kernels_exception_to_the_launch", "[kernels][emulation]") {
  std::vector<int> out(64, 0);
  int* o = out.data();
  CHECK_THROWS_WITH(cuda_emulation::launch(dim3(1), dim3(64), [&] { throwing_kernel(o); }),
                    "thread 5 gives up");
  CHECK(out[5] == 0);
  CHECK(out[4] == 1);  // the others went on past the barrier thread 5 left
}
#endif

#pragma once
// Runs CUDA device code on the cpu, so the kernels are tested where there is no GPU. The threads
// of a block are fibers of the calling thread: the first in the block's order that can run goes
// on until it waits at a barrier or returns, so one warp runs as far ahead of the next as its
// barriers let it; __syncthreads() is a barrier over the block and __shfl_xor_sync() an exchange
// through a barrier over the warp (32 consecutive threads); blocks run one after another, so a
// __shared__ array can be a function-local static. The order is thread order in blocks 0, 3, 6,
// ..., the reverse in blocks 1, 4, 7, ...: a thread that reads another's write without a barrier
// between them reads stale memory in one of the two. Blocks 2, 5, 8, ... shuffle instead: each
// switch goes to a pseudo-random thread that can run (seeded by the block, so runs repeat), and
// the warps drift apart between block barriers as on a device, so a warp that overwrites shared
// memory another warp still reads without a __syncthreads between shows there too. A block whose
// threads all wait at barriers that cannot complete throws rather than hang.
// Under a sanitizer (or with TRAINER_EMULATION_THREADS defined for the whole build) each thread
// is a std::thread and each barrier a std::barrier instead: ThreadSanitizer sees a missing barrier
// between threads, not between fibers of one thread, and AddressSanitizer would need to be told
// of every fiber switch. Elsewhere fibers, because a std::barrier over a block's threads costs a
// round of futex wake-ups and context switches: an order of magnitude slower.
// Covers what kernels/ uses: shared memory, __syncthreads, __syncwarp, xor shuffles, grid-stride
// loops, __nv_bfloat16 and the nvcuda::wmma 16x16x16 API (each lane holds the whole tile; stores
// are done by lane 0 once the warp has arrived, so kernels must __syncwarp() before reading a
// stored tile, as on a device),
// and mma.sync.m16n8k16 and ldmatrix (kernels/mma.cuh) with each lane holding its own fragments
// as a device lane does, exchanged through the warp's barrier, and cp.async (copies deferred to
// the wait that covers them);
// integer atomicAdd/atomicSub; no float atomics, dynamic shared memory or streams. Define
// TRAINER_CUDA_EMULATION, include this, then a kernel source (kernels/common.cuh's launch() then
// runs here; CUDA_CHECK_LAUNCH does nothing).
#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/ops_optim.h"

#if !defined(TRAINER_EMULATION_THREADS) && \
    (defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__))
#define TRAINER_EMULATION_THREADS 1
#endif
#if !defined(TRAINER_EMULATION_THREADS) && defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define TRAINER_EMULATION_THREADS 1
#endif
#endif
#ifndef TRAINER_EMULATION_THREADS
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#endif

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

using cudaStream_t = struct EmulatedStream*;
#define CUDA_CHECK_LAUNCH(name) ((void)(name))

namespace cuda_emulation {

#ifdef TRAINER_EMULATION_THREADS
class Barrier {
 public:
  explicit Barrier(std::ptrdiff_t threads) : sync_(threads) {}
  void arrive_and_wait() { sync_.arrive_and_wait(); }
  void arrive_and_drop() { sync_.arrive_and_drop(); }

 private:
  std::barrier<> sync_;
};
#else
// A barrier among fibers: an arriving fiber yields until every thread still in the block (or
// warp) has arrived; a thread that returned counts no more.
class Barrier {
 public:
  explicit Barrier(std::ptrdiff_t threads) : expected_(threads) {}
  void arrive_and_wait();  // after the scheduler, below
  void arrive_and_drop() {
    --expected_;
    if (arrived_ > 0 && arrived_ == expected_) complete();
  }
  uint64_t phase() const { return phase_; }

 private:
  void complete();  // after the scheduler, below
  std::ptrdiff_t expected_, arrived_ = 0;
  uint64_t phase_ = 0;  // completions so far
};
#endif

struct Warp {
  explicit Warp(std::ptrdiff_t lanes) : sync(lanes) {}
  Barrier sync;
  std::array<uint64_t, 32> slot{};                 // one value per lane (up to 8 bytes)
  std::array<std::array<uint32_t, 6>, 32> frag{};  // mma_m16n8k16: each lane's a[4], b[2]
};

// One thread's cp.async copies: its open group and the committed ones, oldest first.
struct AsyncCopy {
  void* dst;
  const void* src;
};
struct AsyncCopies {
  std::vector<AsyncCopy> open;
  std::vector<std::vector<AsyncCopy>> groups;
};

// The running CUDA thread's view: with fibers, the scheduler sets these at every switch.
inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local Barrier* block_barrier = nullptr;
inline thread_local Warp* warp = nullptr;
inline thread_local unsigned lane = 0;
inline thread_local AsyncCopies* async_copies = nullptr;

// One block's barriers: fresh for every block, because a thread that returns early drops out of
// them for the rest of its block (as an exited CUDA thread no longer counts at __syncthreads).
struct BlockState {
  explicit BlockState(unsigned threads) : sync(static_cast<std::ptrdiff_t>(threads)) {
    for (unsigned w = 0; w * 32 < threads; ++w)
      warps.push_back(std::make_unique<Warp>(std::min(32u, threads - w * 32)));
  }
  Barrier sync;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline dim3 index_in(unsigned i, const dim3& extent) {
  return dim3(i % extent.x, i / extent.x % extent.y, i / (extent.x * extent.y));
}

// A thread that has returned no longer takes part in its block's barriers.
inline void leave_block() {
  warp->sync.arrive_and_drop();
  block_barrier->arrive_and_drop();
}

#ifdef TRAINER_EMULATION_THREADS
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
      AsyncCopies copies;
      async_copies = &copies;
      thread_idx = index_in(t, block);
      block_dim = block;
      grid_dim = grid;
      lane = t % 32;
      for (unsigned b = 0; b < blocks; ++b) {
        block_idx = index_in(b, grid);
        block_barrier = &state->sync;
        warp = state->warps[t / 32].get();
        kernel();
        leave_block();
        block_done.arrive_and_wait();
      }
    });
}
#else
// A fiber's stack: mapped on first use and kept for later launches, with a guard page below it
// so that an overflow faults instead of writing over the next stack.
class FiberStack {
 public:
  static constexpr size_t kBytes = size_t{1} << 20, kGuard = 4096;
  FiberStack() {
    void* p = mmap(nullptr, kBytes + kGuard, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cuda emulation: cannot map a fiber stack");
    base_ = static_cast<char*>(p);
    mprotect(base_, kGuard, PROT_NONE);
  }
  ~FiberStack() { munmap(base_, kBytes + kGuard); }
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  char* bottom() const { return base_ + kGuard; }

 private:
  char* base_ = nullptr;
};

// A fiber enters its stack once through ucontext (makecontext gives it the stack) and switches
// after that through _setjmp/_longjmp, which, unlike swapcontext, do not save and restore the
// signal mask with a system call each: that call was 90% of the emulated kernels' time. A
// fortified build checks that longjmp never goes to a deeper frame, which a switch to another
// stack looks like: there every switch goes through swapcontext.
#if defined(_FORTIFY_SOURCE)
inline constexpr bool kSwitchByJump = false;
#else
inline constexpr bool kSwitchByJump = true;
#endif
struct FiberContext {
  ucontext_t context;
  jmp_buf jump;
};

struct Fiber {
  FiberContext saved;
  bool started = false;
  dim3 thread_idx;
  Warp* warp = nullptr;
  AsyncCopies copies;
  const Barrier* waits_at = nullptr;  // with the phase it waits to end
  uint64_t waits_for_phase = 0;
  bool done = false;  // with this block
};

// The launch whose fibers this thread is running. A fiber lives for the whole launch and runs
// the kernel once per block, as a std::thread of the other way does.
struct FiberLaunch {
  FiberContext scheduler;
  std::unique_ptr<Fiber[]> fibers;
  Fiber* current = nullptr;
  const std::function<void()>* kernel = nullptr;
  uint64_t completions = 0;  // of barriers: each may let fibers run that could not
  std::exception_ptr error;
};
inline thread_local FiberLaunch* fiber_launch = nullptr;
inline thread_local std::vector<std::unique_ptr<FiberStack>> fiber_stacks;

// From the scheduler to fiber f, until it yields. Not inlined, as yield(): _setjmp returns twice,
// which makes the compiler distrust the locals of the function that calls it.
[[gnu::noinline]] inline void resume(FiberLaunch& l, Fiber& f) {
  if (!kSwitchByJump) {
    swapcontext(&l.scheduler.context, &f.saved.context);
  } else if (_setjmp(l.scheduler.jump) == 0) {
    if (f.started) _longjmp(f.saved.jump, 1);
    f.started = true;
    setcontext(&f.saved.context);
  }
}
// From the running fiber back to the scheduler.
[[gnu::noinline]] inline void yield(FiberLaunch& l, Fiber& me) {
  if (!kSwitchByJump)
    swapcontext(&me.saved.context, &l.scheduler.context);
  else if (_setjmp(me.saved.jump) == 0)
    _longjmp(l.scheduler.jump, 1);
}

// A CUDA thread, block after block: resumed for the next block once it is done with this one.
inline void fiber_main() {
  FiberLaunch& l = *fiber_launch;
  for (;;) {
    try {
      (*l.kernel)();
    } catch (...) {  // never unwind past the fiber's first frame; rethrown after the block
      if (!l.error) l.error = std::current_exception();
    }
    leave_block();
    l.current->done = true;
    yield(l, *l.current);
  }
}

inline void Barrier::complete() {
  arrived_ = 0;
  ++phase_;
  ++fiber_launch->completions;
}

inline void Barrier::arrive_and_wait() {
  FiberLaunch& l = *fiber_launch;
  const uint64_t mine = phase_;
  if (++arrived_ == expected_) return complete();
  Fiber& me = *l.current;
  me.waits_at = this;
  me.waits_for_phase = mine;
  while (phase_ == mine) yield(l, me);
  me.waits_at = nullptr;
}

// A context that starts fiber_main on `stack` (which never returns). Not inlined: getcontext
// returns twice, as _setjmp.
[[gnu::noinline]] inline void start_context(ucontext_t& context, const FiberStack& stack) {
  getcontext(&context);
  context.uc_stack.ss_sp = stack.bottom();
  context.uc_stack.ss_size = FiberStack::kBytes;
  context.uc_link = nullptr;
  makecontext(&context, fiber_main, 0);
}

enum class BlockOrder { forward, reverse, shuffled };

// Runs one block: always the first fiber in the block's order that can run (has not returned,
// and is not waiting at a barrier that has not completed since it arrived), until it yields. So
// a warp runs ahead of the next as far as its barriers let it: a block-wide barrier left out
// shows even where the warps exchange values in between. None can run while some have not
// returned: a deadlock. The fibers before `first` could not run when last looked at, and
// nothing but a barrier's completion changes that: the scan starts over only then. Shuffled:
// the scan starts at a pseudo-random fiber each time and wraps.
inline void run_block(FiberLaunch& l, unsigned threads, BlockState& state, BlockOrder order,
                      uint64_t seed) {
  const bool reverse = order == BlockOrder::reverse;
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = l.fibers[t];
    f.warp = state.warps[t / 32].get();
    f.done = false;
  }
  block_barrier = &state.sync;
  const auto fiber_at = [&](unsigned i) -> Fiber& {
    return l.fibers[reverse ? threads - 1 - i : i];
  };
  const auto can_run = [](const Fiber& f) {
    return !f.done && (!f.waits_at || f.waits_at->phase() != f.waits_for_phase);
  };
  unsigned first = 0;
  uint64_t completions = l.completions;
  trainer::SplitMix64 random(seed);  // (shuffled only)
  for (unsigned live = threads; live > 0;) {
    if (order == BlockOrder::shuffled) {
      const auto start = static_cast<unsigned>(random.next() % threads);
      unsigned i = 0;
      while (i < threads && !can_run(fiber_at((start + i) % threads))) ++i;
      first = i == threads ? threads : (start + i) % threads;
    } else {
      if (l.completions != completions) first = 0, completions = l.completions;
      while (first < threads && !can_run(fiber_at(first))) ++first;
    }
    if (first == threads) {
      if (l.error) std::rethrow_exception(l.error);
      throw std::logic_error(
          "cuda emulation: every thread left in the block waits at a barrier that cannot "
          "complete (a __syncthreads or warp exchange that not every thread reaches)");
    }
    const unsigned t = reverse ? threads - 1 - first : first;
    Fiber& f = l.fibers[t];
    l.current = &f;
    thread_idx = f.thread_idx;
    lane = t % 32;
    warp = f.warp;
    async_copies = &f.copies;
    resume(l, f);
    if (f.done) --live;
  }
  if (l.error) std::rethrow_exception(l.error);
}

// Runs kernel() over grid x block, one block after another, each thread of a block a fiber.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  const unsigned threads = block.x * block.y * block.z;
  const unsigned blocks = grid.x * grid.y * grid.z;
  while (fiber_stacks.size() < threads) fiber_stacks.push_back(std::make_unique<FiberStack>());
  FiberLaunch l;
  l.kernel = &kernel;
  l.fibers = std::make_unique<Fiber[]>(threads);
  for (unsigned t = 0; t < threads; ++t) {
    l.fibers[t].thread_idx = index_in(t, block);
    start_context(l.fibers[t].saved.context, *fiber_stacks[t]);
  }
  fiber_launch = &l;
  struct Unset {  // the launch's fibers are left where they are, to start afresh next launch
    ~Unset() { fiber_launch = nullptr; }
  } unset;
  block_dim = block;
  grid_dim = grid;
  for (unsigned b = 0; b < blocks; ++b) {
    BlockState state(threads);
    block_idx = index_in(b, grid);
    const BlockOrder order = b % 3 == 0   ? BlockOrder::forward
                             : b % 3 == 1 ? BlockOrder::reverse
                                          : BlockOrder::shuffled;
    run_block(l, threads, state, order, b);
  }
}
#endif
}  // namespace cuda_emulation

#define threadIdx (::cuda_emulation::thread_idx)
#define blockIdx (::cuda_emulation::block_idx)
#define blockDim (::cuda_emulation::block_dim)
#define gridDim (::cuda_emulation::grid_dim)
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(...)
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

// A product rounded on its own (never fused into an add), as the device intrinsic.
inline float __fmul_rn(float a, float b) {
  volatile float p = a * b;
  return p;
}

// Integer atomics (atomic where a block's threads are std::threads); each returns the old value.
inline int32_t atomicAdd(int32_t* p, int32_t v) {
  return std::atomic_ref<int32_t>(*p).fetch_add(v);
}
inline int32_t atomicSub(int32_t* p, int32_t v) {
  return std::atomic_ref<int32_t>(*p).fetch_sub(v);
}

inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) {
  ::cuda_emulation::warp->sync.arrive_and_wait();
}

// kernels/mma.cuh's mma.sync.m16n8k16 (bf16 in, fp32 accumulation): every lane of the warp
// posts its fragments, then computes its own four outputs from everybody's, by the PTX ISA's
// fragment table (written out in kernels/mma.cuh).
inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  auto& w = *::cuda_emulation::warp;
  const unsigned me = ::cuda_emulation::lane;
  w.frag[me] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  w.sync.arrive_and_wait();
  auto half = [](uint32_t reg, unsigned k) {  // element k % 2 of a packed pair, as fp32
    const uint32_t bits = (k % 2 ? reg >> 16 : reg) & 0xffffu;
    return trainer::cpu::float_from_bf16_bits(static_cast<uint16_t>(bits));
  };
  auto A = [&](unsigned r, unsigned k) {  // lane (r%8)*4 + (k%8)/2, register (r>=8) + 2*(k>=8)
    return half(w.frag[(r % 8) * 4 + (k % 8) / 2][(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k);
  };
  auto B = [&](unsigned k, unsigned n) {  // lane n*4 + (k%8)/2, register 4 + (k>=8)
    return half(w.frag[n * 4 + (k % 8) / 2][4 + (k >= 8 ? 1 : 0)], k);
  };
  const unsigned g = me / 4, t = me % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned r = g + (i >= 2 ? 8 : 0), n = 2 * t + i % 2;
    float acc = d[i];
    for (unsigned k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
    d[i] = acc;
  }
  w.sync.arrive_and_wait();  // nobody posts again before every lane has read
}

// kernels/mma.cuh's ldmatrix.sync.m8n8.x4 (.trans with kTrans): every lane posts its row
// address, then gathers its fragment of each of the four 8x8 matrices from the rows of the lanes
// that address them (matrix i's row j comes from lane 8i + j).
template <bool kTrans>
void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
  auto& w = *::cuda_emulation::warp;
  const unsigned me = ::cuda_emulation::lane;
  w.slot[me] = reinterpret_cast<uintptr_t>(row);
  w.sync.arrive_and_wait();
  auto row_of = [&](unsigned l) { return reinterpret_cast<const uint16_t*>(w.slot[l]); };
  const unsigned g = me / 4, t = me % 4;
  for (unsigned i = 0; i < 4; ++i) {
    // (row g, columns 2t, 2t+1), or transposed (rows 2t, 2t+1, column g)
    const uint16_t lo = kTrans ? row_of(8 * i + 2 * t)[g] : row_of(8 * i + g)[2 * t];
    const uint16_t hi = kTrans ? row_of(8 * i + 2 * t + 1)[g] : row_of(8 * i + g)[2 * t + 1];
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  w.sync.arrive_and_wait();  // nobody posts again before every lane has read
}

// kernels/mma.cuh's cp.async: a copy is only queued in its thread's open group; commit closes the
// group; cp_async_wait<N> performs the copies of all but the newest N groups. A kernel that
// reads a tile before the wait that covers it therefore reads stale shared memory here too.
inline void cp_async16(void* dst, const void* src) {
  ::cuda_emulation::async_copies->open.push_back({dst, src});
}
inline void cp_async_commit() {
  auto& q = *::cuda_emulation::async_copies;
  q.groups.push_back(std::move(q.open));
  q.open.clear();
}
template <int kPending>
void cp_async_wait() {
  auto& groups = ::cuda_emulation::async_copies->groups;
  while (groups.size() > static_cast<size_t>(kPending)) {
    for (const auto& c : groups.front()) std::memcpy(c.dst, c.src, 16);
    groups.erase(groups.begin());
  }
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

// bfloat16 storage, rounded to nearest even as __float2bfloat16 does: the cpu backend's rounding.
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
  return {trainer::cpu::bf16_bits_from_float(f)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  return trainer::cpu::float_from_bf16_bits(b.bits);
}

namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// The whole 16x16 tile in every lane, as floats (bf16 inputs are exact in float).
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16x16x16 tiles only");
  float v[16][16];
};

inline float as_float(float x) {
  return x;
}
inline float as_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// matrix_a is [m][k], matrix_b is [k][n]; v[r][c] is row r, column c of that matrix.
template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      f.v[r][c] = as_float(std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      f.v[r][c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}
// A device's store_matrix_sync is warp-synchronous: every lane has done what comes before it (the
// loads of the tile it overwrites included) when the tile is written, so lane 0 waits for the warp
// here. Nothing waits after it: a lane reading the stored tile needs the kernel's __syncwarp().
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  ::cuda_emulation::warp->sync.arrive_and_wait();
  if (::cuda_emulation::lane != 0) return;
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.v[r][c];
}
template <class Use, class T, class Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float value) {
  for (auto& row : f.v)
    for (float& x : row) x = value;
}
template <class T, class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  fragment<accumulator, 16, 16, 16, float> out;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float acc = c.v[m][n];
      for (int k = 0; k < 16; ++k) acc += a.v[m][k] * b.v[k][n];
      out.v[m][n] = acc;
    }
  d = out;
}
}  // namespace nvcuda::wmma

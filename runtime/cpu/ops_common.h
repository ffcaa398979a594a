#pragma once
// Shared helpers of the cpu reference ops: an OpenMP "parallel for" that compiles away without
// OpenMP, and the size below which threading costs more than it saves.
#include <algorithm>
#include <cstdint>

#define TRAINER_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
// Static schedule: each iteration writes only its own outputs, so results never depend on
// the thread count.
#define TRAINER_PARALLEL_FOR_IF(cond) TRAINER_PRAGMA(omp parallel for schedule(static) if (cond))
// Vectorise the next loop (its iterations are independent); a sum reduction's order is then fixed
// by the vector width, not by the thread count, so results stay run-to-run identical.
#define TRAINER_SIMD TRAINER_PRAGMA(omp simd)
#define TRAINER_SIMD_SUM(var) TRAINER_PRAGMA(omp simd reduction(+ : var))
#else
#define TRAINER_PARALLEL_FOR_IF(cond)
#define TRAINER_SIMD
#define TRAINER_SIMD_SUM(var)
#endif

namespace trainer::cpu {

inline constexpr int64_t kParallelMinWork = int64_t{1} << 14;  // elements touched
// Reductions over rows run in parallel over blocks of this many output columns, each column
// summing its rows in order 0..N-1: the same order as a serial loop, for any thread count.
inline constexpr int64_t kColumnBlock = 32;

inline int64_t column_blocks(int64_t cols) {
  return (cols + kColumnBlock - 1) / kColumnBlock;
}
inline int64_t block_begin(int64_t blk) {
  return blk * kColumnBlock;
}
inline int64_t block_end(int64_t blk, int64_t cols) {
  return std::min(cols, (blk + 1) * kColumnBlock);
}

}  // namespace trainer::cpu

#pragma once
// The warp-level bf16 tensor-core product mma.sync.m16n8k16 (fp32 accumulation) and the loads of
// its fragments from shared memory, for kernels that keep their tiles in registers.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and t = lane % 4;
// each uint32_t holds two bf16, the lower column (A, C) or row (B) in the low half:
//   A (16x16, row major) a[4]: a[0] = A[g][2t..2t+1],     a[1] = A[g+8][2t..2t+1],
//                              a[2] = A[g][2t+8..2t+9],   a[3] = A[g+8][2t+8..2t+9]
//   B (16x8)             b[2]: b[0] = B[2t..2t+1][g],     b[1] = B[2t+8..2t+9][g]
//   C, D (16x8, fp32)    c[4]: c[0..1] = C[g][2t..2t+1],  c[2..3] = C[g+8][2t..2t+1]
// So the C fragments of two adjacent 8-column tiles, rounded to bf16 and packed, are the A
// fragment of the 16 columns they cover (pack_c; FlashAttention-2 keeps P in registers so).
// tests/unit/kernels/cuda_emulation.h implements mma_m16n8k16 lane by lane from this table.
#include <cstdint>
#ifdef TRAINER_CUDA_EMULATION
#include <cmath>
#include <cstring>
#endif

#include "kernels/bf16.cuh"
#include "kernels/vec.cuh"

namespace trainer::kernels {

#ifndef TRAINER_CUDA_EMULATION
// d += a * b over one 16x8x16 tile.
__device__ inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: four 8x8 bf16 matrices from shared memory.
// Lane l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); register i
// receives matrix i as lane l's fragment (row g, columns 2t, 2t+1), or with kTrans the fragment
// of its transpose (rows 2t, 2t+1, column g).
template <bool kTrans>
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// cp.async.cg.shared.global: 16 bytes from global src to shared dst (both 16-byte aligned),
// not through registers; they land by the cp_async_wait that covers their commit group.
__device__ inline void cp_async16(void* dst, const void* src) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
// Closes this thread's group of cp_async16 copies issued since the last commit.
__device__ inline void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of this thread's committed groups are still in flight (other
// threads' copies are visible after a __syncthreads that follows their waits).
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#endif

// Two adjacent bf16 (p[0] in the low half); p 4-byte aligned.
__device__ inline uint32_t load_pair(const uint16_t* p) {
#ifdef TRAINER_CUDA_EMULATION
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}

// The A fragment of the 16x16 tile at `a` (bf16, row major, `ld` elements per row).
__device__ inline void load_a(uint32_t (&f)[4], const uint16_t* a, int ld) {
  const int g = static_cast<int>(threadIdx.x % 32) / 4, t = static_cast<int>(threadIdx.x % 4);
  f[0] = load_pair(a + g * ld + 2 * t);
  f[1] = load_pair(a + (g + 8) * ld + 2 * t);
  f[2] = load_pair(a + g * ld + 2 * t + 8);
  f[3] = load_pair(a + (g + 8) * ld + 2 * t + 8);
}

// The B fragments of the two 8-column tiles (b0: columns 0-7, b1: 8-15) of the 16x16 block of
// B[k][n] at `b`, with one ldmatrix: B given row major (b[k][n], kRowMajor: ldmatrix .trans) or
// as its transpose (b[n][k]); `ld` bf16 per row, rows 16-byte aligned.
template <bool kRowMajor>
__device__ inline void load_b_pair(uint32_t (&b0)[2], uint32_t (&b1)[2], const uint16_t* b,
                                   int ld) {
  const int lane = static_cast<int>(threadIdx.x % 32), m = lane / 8, r = lane % 8;
  uint32_t x[4];
  if constexpr (kRowMajor)  // matrices: k 0-7 | 8-15 of n 0-7, then the same of n 8-15
    ldmatrix_x4<true>(x, b + ((m % 2) * 8 + r) * ld + (m / 2) * 8);
  else  // matrices: n 0-7 with k 0-7 | 8-15, then n 8-15 with the same
    ldmatrix_x4<false>(x, b + ((m / 2) * 8 + r) * ld + (m % 2) * 8);
  b0[0] = x[0], b0[1] = x[1], b1[0] = x[2], b1[1] = x[3];
}

// The C fragments of kN/8 8-column tiles rounded to bf16 and packed, pair[n][r] holding row r
// (g, g + 8) of tile n: pair[2k] and pair[2k + 1] together are the A fragment {pair[2k][0],
// pair[2k][1], pair[2k+1][0], pair[2k+1][1]} of columns 16k..16k+15.
template <int kN>
__device__ inline void pack_c(uint32_t (&pair)[kN / 8][2], const float (&c)[kN / 8][4]) {
  for (int n = 0; n < kN / 8; ++n) {
    pair[n][0] = pack_bf16(c[n][0], c[n][1]);
    pair[n][1] = pack_bf16(c[n][2], c[n][3]);
  }
}

}  // namespace trainer::kernels

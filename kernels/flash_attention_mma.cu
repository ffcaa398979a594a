// Causal self-attention on tensor cores with the tiles in registers: FlashAttention-2's kernels
// on mma.sync.m16n8k16 (kernels/mma.cuh). Scores, probabilities, the output accumulator and the
// gradients' accumulators live in each lane's fragment registers; shared memory holds only the
// K/V (or Q/dO) tiles a block walks, row major, read by ldmatrix (.trans where the product needs
// the transpose), rows padded so that those reads meet no bank conflict. The
// WMMA kernels of flash_attention_tc.cu cannot do this (a WMMA accumulator's element-to-row map
// is unspecified), so they pass S, P and O through shared memory on every tile.
//
// Numerics as flash_attention_tc.cu: q (pre-scaled by 1/sqrt(HS)), k, v, P, dout and dS rounded
// to bf16 for the products; softmax statistics, sums and accumulators fp32; the normaliser sums
// the bf16 P that P V uses; each output rounded once (out and dqkv may be bf16). Exponentials in
// base 2, each one fma (score times log2(e), less the row's maximum or lse in base 2) and one
// ex2.approx.ftz; lse is written in natural log. Causal masks are applied on diagonal tiles only;
// rows and columns past T are zero tiles whose lse is +inf. Head sizes 32, 64, 80, 96 and 128
// (kFlashHeadSizes from 32).
//
// A block is 4 warps; each warp owns 16 rows (queries in forward and dq, keys in dk/dv), or in
// the forward and dq 32 (rows_per_warp: two 16-row slabs sharing every K/V fragment read, the
// same bits; above head size 64 always 16, as the accumulators fill the registers). dq and dk/dv
// come from two kernels, with no atomics: deterministic.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/attention_common.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/mma.cuh"
#include "runtime/core/attention_state.h"

namespace trainer::kernels {
namespace {

constexpr int kWarpsMma = 4;
constexpr int kThreadsMma = kWarpsMma * 32;
constexpr int kRowsMma = 16 * kWarpsMma;  // rows a block owns
// At least 3 blocks (12 warps) per SM: at most 168 registers a thread (ptxas at sm_90 gives the
// dk/dv kernel 172 unasked, which leaves room for 2). Two slabs a warp, or a head size above 64
// (up to twice the accumulators and fragments), take 2 blocks: up to 255 registers.
constexpr int kMinBlocksMma = 3;
template <int HS, int kSlabs>
constexpr int kMinBlocksOf = kSlabs > 1 || HS > 64 ? 2 : kMinBlocksMma;
// Keys per forward tile: 64, or 32 above head size 64, where two 64-key K/V buffers would pass
// the 48 KB of static shared memory (at 96 and 128).
template <int HS>
constexpr int kFwdTileOf = HS > 64 ? 32 : 64;
constexpr int kBwdTile = 32;  // keys (dq) or queries (dk/dv) per backward tile
// The most 16-row slabs a warp takes at this head size (see above).
template <int HS>
constexpr int kMaxSlabsOf = HS > 64 ? 1 : 2;
constexpr int kPad = 8;  // bf16 per row of padding: rows land 4 banks apart

// 8 consecutive elements at p as bf16, packed in pairs (the lower element in the low half): a
// bf16 source with mul 1 as it is, anything else read as fp32, times mul, rounded. vec: p is
// 16-byte aligned, and read in 16-byte accesses.
__device__ inline void read8(uint32_t (&w)[4], const uint16_t* p, float mul, bool vec) {
  if (vec)
    load16(w, p);
  else
    for (int i = 0; i < 4; ++i)
      w[i] = static_cast<uint32_t>(p[2 * i]) | (static_cast<uint32_t>(p[2 * i + 1]) << 16);
  if (mul != 1.0f)
    for (uint32_t& x : w) x = pack_bf16(bf16_lo(x) * mul, bf16_hi(x) * mul);
}
__device__ inline void read8(uint32_t (&w)[4], const float* p, float mul, bool vec) {
  uint32_t lo[4], hi[4];
  if (vec) {
    load16(lo, p);
    load16(hi, p + 4);
  } else {
    for (int i = 0; i < 4; ++i) lo[i] = __float_as_uint(p[i]), hi[i] = __float_as_uint(p[4 + i]);
  }
  for (int i = 0; i < 2; ++i) {
    w[i] = pack_bf16(__uint_as_float(lo[2 * i]) * mul, __uint_as_float(lo[2 * i + 1]) * mul);
    w[2 + i] = pack_bf16(__uint_as_float(hi[2 * i]) * mul, __uint_as_float(hi[2 * i + 1]) * mul);
  }
}

// kRowsT x HS of src(t)[d] * mul, t = t0 + row (zeros past T), as bf16 into dst (row major,
// dst[row * ld + d]). Every thread first issues all its reads (8 elements each, 16-byte accesses
// when vec), then its stores.
template <int HS, int kRowsT, class Src>
__device__ void load_tile(uint16_t* dst, int ld, int64_t t0, int64_t T, Src src, float mul,
                          bool vec) {
  constexpr int kChunks = HS / 8, kTotal = kRowsT * kChunks;
  constexpr int kPerThread = (kTotal + kThreadsMma - 1) / kThreadsMma;
  constexpr bool kRagged = kTotal % kThreadsMma != 0;  // head size 80: the last pass is partial
  uint32_t w[kPerThread][4];
  for (int i = 0; i < kPerThread; ++i) {
    const int e = i * kThreadsMma + static_cast<int>(threadIdx.x);
    if (kRagged && e >= kTotal) break;
    const int64_t t = t0 + e / kChunks;
    if (t < T)
      read8(w[i], src(t) + e % kChunks * 8, mul, vec);
    else
      w[i][0] = w[i][1] = w[i][2] = w[i][3] = 0u;
  }
  for (int i = 0; i < kPerThread; ++i) {
    const int e = i * kThreadsMma + static_cast<int>(threadIdx.x);
    if (kRagged && e >= kTotal) break;
    store16(dst + e / kChunks * ld + e % kChunks * 8, w[i]);
  }
}

// load_tile's copy with mul 1, through cp.async (16-byte copies that land by the cp_async_wait
// covering the caller's next commit) when the source is bf16 and vec; else load_tile itself.
template <int HS, int kRowsT, class Src>
__device__ void fetch_tile(uint16_t* dst, int ld, int64_t t0, int64_t T, Src src, bool vec) {
  if constexpr (std::is_same_v<decltype(src(0)), const uint16_t*>) {
    if (vec) {
      constexpr int kChunks = HS / 8, kTotal = kRowsT * kChunks;
      const uint32_t zeros[4] = {0u, 0u, 0u, 0u};
      for (int i = 0; i < (kTotal + kThreadsMma - 1) / kThreadsMma; ++i) {
        const int e = i * kThreadsMma + static_cast<int>(threadIdx.x);
        if (kTotal % kThreadsMma != 0 && e >= kTotal) break;  // (head size 80)
        const int64_t t = t0 + e / kChunks;
        uint16_t* d = dst + e / kChunks * ld + e % kChunks * 8;
        if (t < T)
          cp_async16(d, src(t) + e % kChunks * 8);
        else
          store16(d, zeros);
      }
      return;
    }
  }
  load_tile<HS, kRowsT>(dst, ld, t0, T, src, 1.0f, vec);
}

// Tile j of the keys and values (keys kTile * j ...) into k and v, as one cp.async group.
template <int HS, int kTile, class QkvT>
__device__ void fetch_kv(uint16_t* k, uint16_t* v, int j, const AttentionHead<HS, QkvT>& hd,
                         int64_t T, bool vec) {
  const int64_t k0 = int64_t{j} * kTile;
  fetch_tile<HS, kTile>(
      k, HS + kPad, k0, T, [&](int64_t i) { return hd.k(i); }, vec);
  fetch_tile<HS, kTile>(
      v, HS + kPad, k0, T, [&](int64_t i) { return hd.v(i); }, vec);
  cp_async_commit();
}

// Two buffers of a K tile and a V tile: kv[buffer][0] keys, kv[buffer][1] values.
template <int HS, int kTile>
using KvBuffers = uint16_t[2][2][kTile * (HS + kPad)];

// Walks the K/V tiles of keys [0, key_end) through the two buffers (tile 0 already fetched into
// kv[0]): tile j + 1 is fetched while visit(k0, k tile, v tile) multiplies tile j, between
// barriers.
template <int HS, int kTile, class QkvT, class Visit>
__device__ void walk_kv(KvBuffers<HS, kTile>& kv, int64_t key_end,
                        const AttentionHead<HS, QkvT>& hd, int64_t T, bool vec, Visit visit) {
  const int tiles = static_cast<int>((key_end + kTile - 1) / kTile);
  for (int j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      fetch_kv<HS, kTile>(kv[(j + 1) % 2][0], kv[(j + 1) % 2][1], j + 1, hd, T, vec);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile j is in its buffers, every thread's copies
    visit(int64_t{j} * kTile, kv[j % 2][0], kv[j % 2][1]);
    __syncthreads();  // buffers j % 2 are no longer read: the fetch of tile j + 2 may fill them
  }
}

// For each of a warp's kSlabs 16-row slabs i with live[i]: s[i][n] = A_i (16 x HS, as HS/16 A
// fragments) times the transposes of the 8-row groups of `rows` (kN x HS, bf16 row major, ld):
// 16 x kN, as kN/8 C fragments. Each B fragment pair read from shared memory feeds every slab's
// products (the point of more than one slab a warp). live is warp-uniform.
template <int HS, int kN, int kSlabs>
__device__ void scores_slabs(float (&s)[kSlabs][kN / 8][4], const uint32_t (&a)[kSlabs][HS / 16][4],
                             const uint16_t* rows, int ld, const bool (&live)[kSlabs]) {
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i)
    for (int n = 0; n < kN / 8; ++n) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
  for (int n = 0; n < kN / 8; n += 2)
    for (int k = 0; k < HS / 16; ++k) {
      uint32_t b0[2], b1[2];
      load_b_pair<false>(b0, b1, rows + n * 8 * ld + k * 16, ld);
      TRAINER_UNROLL
      for (int i = 0; i < kSlabs; ++i)
        if (live[i]) {
          mma_m16n8k16(s[i][n], a[i][k], b0);
          mma_m16n8k16(s[i][n + 1], a[i][k], b1);
        }
    }
}
template <int HS, int kN>
__device__ void scores(float (&s)[kN / 8][4], const uint32_t (&a)[HS / 16][4], const uint16_t* rows,
                       int ld) {
  const bool live[1] = {true};
  scores_slabs<HS, kN, 1>(reinterpret_cast<float(&)[1][kN / 8][4]>(s),
                          reinterpret_cast<const uint32_t(&)[1][HS / 16][4]>(a), rows, ld, live);
}

// For each live slab i: acc[i] (16 x HS) += P_i (16 x kK, packed bf16 C fragments: pack_c) times
// B (kK x HS, bf16 row major, ld), each B fragment pair feeding every slab.
template <int HS, int kK, int kSlabs>
__device__ void accumulate_slabs(float (&acc)[kSlabs][HS / 8][4],
                                 const uint32_t (&p)[kSlabs][kK / 8][2], const uint16_t* b, int ld,
                                 const bool (&live)[kSlabs]) {
  for (int k = 0; k < kK / 16; ++k)
    for (int n = 0; n < HS / 8; n += 2) {
      uint32_t b0[2], b1[2];
      load_b_pair<true>(b0, b1, b + k * 16 * ld + n * 8, ld);
      TRAINER_UNROLL
      for (int i = 0; i < kSlabs; ++i)
        if (live[i]) {
          const uint32_t a[4] = {p[i][2 * k][0], p[i][2 * k][1], p[i][2 * k + 1][0],
                                 p[i][2 * k + 1][1]};
          mma_m16n8k16(acc[i][n], a, b0);
          mma_m16n8k16(acc[i][n + 1], a, b1);
        }
    }
}
template <int HS, int kK>
__device__ void accumulate(float (&acc)[HS / 8][4], const uint32_t (&p)[kK / 8][2],
                           const uint16_t* b, int ld) {
  const bool live[1] = {true};
  accumulate_slabs<HS, kK, 1>(reinterpret_cast<float(&)[1][HS / 8][4]>(acc),
                              reinterpret_cast<const uint32_t(&)[1][kK / 8][2]>(p), b, ld, live);
}

// Row r (0: g, 1: g + 8) of a warp's 16 x HS accumulator, columns 2t, 2t+1 of each 8-wide tile,
// times mul, into y[d] (the row's output, fp32 or bf16).
template <int HS, class OutT>
__device__ void store_row(OutT* y, const float (&acc)[HS / 8][4], int r, float mul) {
  const int t = static_cast<int>(threadIdx.x % 4);
  for (int n = 0; n < HS / 8; ++n) {
    store_out(y + n * 8 + 2 * t, acc[n][2 * r] * mul);
    store_out(y + n * 8 + 2 * t + 1, acc[n][2 * r + 1] * mul);
  }
}

// The sum over a row's four lanes (the lanes of one group g).
__device__ inline float group_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ inline float group_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// The first rows of warp w's 16-row slabs in a block whose rows start at q0: w, w + 4, ...
// (interleaved, so that the warps' causal work stays even).
template <int kSlabs>
__device__ void slab_rows(int64_t (&wq0)[kSlabs], int64_t q0, int warp) {
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i) wq0[i] = q0 + 16 * (warp + kWarpsMma * i);
}
// Which slabs see a key of the tile at k0 (a slab is dead when every key of the tile is after
// all its rows); whether any does: the last slab, with the last rows, is the last to die.
// (wp0: the slabs' first positions, each slab's 16 rows being consecutive positions)
template <int kSlabs>
__device__ bool slabs_live(bool (&live)[kSlabs], const int64_t (&wp0)[kSlabs], int64_t k0) {
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i) live[i] = k0 <= wp0[i] + 15;
  return live[kSlabs - 1];
}
// The sequence positions of the slabs' first rows (QueryRows; a slab's 16 rows are consecutive
// positions: the launchers take 16 | L).
template <int kSlabs>
__device__ void slab_positions(int64_t (&wp0)[kSlabs], const int64_t (&wq0)[kSlabs],
                               const QueryRows& qr) {
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i) wp0[i] = qr.position(wq0[i]);
}
// The keys a block of query rows [q0, q0 + rows) walks: up to its last row's position.
__device__ inline int64_t block_key_end(const QueryRows& qr, int64_t q0, int rows) {
  return qr.position((q0 + rows < qr.rows ? q0 + rows : qr.rows) - 1) + 1;
}

// Sets to -inf the scores (a 16 x kN tile as C fragments) whose column lies after the row: the
// element at (row g + 8 * (e / 2), column 8 n + 2 t + e % 2) when 8 n + e % 2 - 8 * (e / 2) > rel,
// rel = (the tile's first row - its first column) + g - 2 t. Only diagonal tiles call it, and n
// and e are constants: one compare and one select per score.
template <int kN>
__device__ void mask_after_row(float (&s)[kN / 8][4], int rel) {
  for (int n = 0; n < kN / 8; ++n)
    for (int e = 0; e < 4; ++e)
      if (8 * n + e % 2 - 8 * (e / 2) > rel) s[n][e] = -INFINITY;
}
// The same for columns before the row (< rel): dk/dv's tiles, keys by rows, queries by columns.
template <int kN>
__device__ void mask_before_row(float (&s)[kN / 8][4], int rel) {
  for (int n = 0; n < kN / 8; ++n)
    for (int e = 0; e < 4; ++e)
      if (8 * n + e % 2 - 8 * (e / 2) < rel) s[n][e] = -INFINITY;
}

// ---- forward: one block per (64 kSlabs queries, b*h), walking 64-key tiles. Warp w owns the
// 16-row slabs w, w + 4, ... of its block (interleaved, so that the warps' causal work is even),
// and every K/V fragment it reads from shared memory feeds each of its slabs: kSlabs 2 halves the
// shared-memory reads per product (FlashAttention-2 gives a warp 32 rows so). A row's arithmetic
// is the same for either kSlabs: the outputs are bit for bit equal.
template <int HS, int kSlabs, class OutT, class QkvT>
__global__ void __launch_bounds__(kThreadsMma, kMinBlocksOf<HS, kSlabs>)
    mma_forward_kernel(OutT* out, float* lse, const QkvT* qkv, int64_t T, int64_t C, int64_t NH,
                       float scale, QueryRows qr) {
  constexpr int LD = HS + kPad, kRows = kRowsMma * kSlabs, kFwdTile = kFwdTileOf<HS>;
  // Two K/V buffers: tile j + 1 is fetched (cp.async for a bf16 qkv) while tile j is multiplied.
  // The block's q rows pass through the second before walk_kv fetches tile 1 into it.
  __shared__ __align__(16) KvBuffers<HS, kFwdTile> kv;
  static_assert(kRows * LD <= 2 * kFwdTile * LD, "q fits one K/V buffer");
  uint16_t* qs = kv[1][0];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // The last query blocks have the most keys to walk: they start first (the grid runs backwards).
  const int64_t q0 = int64_t{gridDim.y - 1 - blockIdx.y} * kRows;
  int64_t wq0[kSlabs], wp0[kSlabs];  // each slab's first row, and its position
  slab_rows(wq0, q0, warp);
  slab_positions(wp0, wq0, qr);
  const bool vec = aligned16(qkv);  // then so is every row read: HS and C are multiples of 8
  const int64_t key_end = block_key_end(qr, q0, kRows);
  fetch_kv<HS, kFwdTile>(kv[0][0], kv[0][1], 0, hd, T, vec);  // in flight while q is loaded

  load_tile<HS, kRows>(
      qs, LD, q0, qr.rows, [&](int64_t i) { return hd.q(qr.position(i)); }, scale, vec);
  __syncthreads();
  uint32_t qf[kSlabs][HS / 16][4];
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i)
    for (int k = 0; k < HS / 16; ++k) load_a(qf[i][k], qs + (wq0[i] - q0) * LD + k * 16, LD);
  __syncthreads();  // every warp holds its q: walk_kv may fetch tile 1 over qs
  float o[kSlabs][HS / 8][4] = {};
  // m: the row's running maximum score; l: this lane's part of the sum
  float m[kSlabs][2], l[kSlabs][2];
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i) m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.0f;

  walk_kv<HS, kFwdTile>(
      kv, key_end, hd, T, vec, [&](int64_t k0, const uint16_t* kt, const uint16_t* vt) {
        bool live[kSlabs];
        if (!slabs_live(live, wp0, k0)) return;
        float s[kSlabs][kFwdTile / 8][4];
        scores_slabs<HS, kFwdTile, kSlabs>(s, qf, kt, LD, live);
        uint32_t p[kSlabs][kFwdTile / 8][2];  // P, rounded to bf16 once, as P V reads it
        TRAINER_UNROLL
        for (int i = 0; i < kSlabs; ++i) {
          if (!live[i]) continue;
          if (k0 + kFwdTile - 1 > wp0[i])  // a diagonal tile: keys after the row masked
            mask_after_row<kFwdTile>(s[i], static_cast<int>(wp0[i] - k0) + g - 2 * t);
          for (int r = 0; r < 2; ++r) {
            float mx = m[i][r];
            for (int n = 0; n < kFwdTile / 8; ++n)
              mx = fmaxf(mx, fmaxf(s[i][n][2 * r], s[i][n][2 * r + 1]));
            mx = group_max(mx);
            // In base 2, each exponent one fma. A row with no visible key yet keeps m = -inf:
            // its p are then 2^-inf = 0, and so is alpha (o and l are 0). An unchanged maximum
            // gives alpha 2^0 = 1 exactly.
            const float base = mx == -INFINITY ? 0.0f : mx * kLog2e;
            const float alpha = mx == -INFINITY ? 0.0f : exp2_ftz((m[i][r] - mx) * kLog2e);
            m[i][r] = mx;
            float sum = 0.0f;
            for (int n = 0; n < kFwdTile / 8; ++n) {
              p[i][n][r] = pack_bf16(exp2_ftz(fmaf(s[i][n][2 * r], kLog2e, -base)),
                                     exp2_ftz(fmaf(s[i][n][2 * r + 1], kLog2e, -base)));
              sum += bf16_lo(p[i][n][r]) + bf16_hi(p[i][n][r]);  // what P V uses
            }
            l[i][r] = l[i][r] * alpha + sum;
            for (int n = 0; n < HS / 8; ++n) o[i][n][2 * r] *= alpha, o[i][n][2 * r + 1] *= alpha;
          }
        }
        accumulate_slabs<HS, kFwdTile, kSlabs>(o, p, vt, LD, live);  // O += P V
      });
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i)
    for (int r = 0; r < 2; ++r) {
      const float sum = group_sum(l[i][r]);
      const int64_t row = wq0[i] + g + 8 * r;
      if (row >= qr.rows) continue;
      store_row<HS>(out + qr.o(hd, row), o[i], r, 1.0f / sum);
      if (t == 0) lse[bh * qr.rows + row] = m[i][r] + logf(sum);
    }
}

// ---- dq: one block per (64 kSlabs queries, b*h), walking 32-key tiles; warp w owns the 16-row
// slabs w, w + 4, ... as the forward's, every K/V fragment read feeding each (kSlabs 2: the same
// bits as 1). For dk/dv it writes D_i = <dout_i, out_i>, and its rows of the pre-scaled q and of
// dout as the bf16 that the products read (q_copy, do_copy: [b*h][T][HS]), so that dk/dv fetch
// their tiles by cp.async, a tile ahead, rather than converting fp32 dout (and scaling q) on
// every tile of every key block. The block's rows pass through shared memory 64 at a time (the
// slabs of one index), so that 32 rows a warp fit the same 36.9 KB.
template <int HS, int kSlabs, class OutT, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kThreadsMma, kMinBlocksOf<HS, kSlabs>)
    mma_backward_dq_kernel(DqkvT* dqkv, float* dsum, uint16_t* q_copy, uint16_t* do_copy,
                           const float* dout, const QkvT* qkv, const OutT* out, const float* lse,
                           int64_t T, int64_t C, int64_t NH, float scale, QueryRows qr) {
  constexpr int LD = HS + kPad, kRows = kRowsMma * kSlabs;
  // Two K/V buffers: tile j + 1 is fetched (cp.async for a bf16 qkv) while tile j is multiplied.
  __shared__ __align__(16) KvBuffers<HS, kBwdTile> kv;
  // q's and dout's rows pass through shared memory 64 at a time: buffers of their own, or at head
  // size 128 (where those and the K/V buffers would pass 48 KB) by turns through the second K/V
  // buffer, before walk_kv fetches tile 1 into it.
  constexpr bool kStageInKv = HS > 64;
  static_assert(kRowsMma <= 2 * kBwdTile, "64 rows fit one K/V buffer");
  __shared__ __align__(16) uint16_t staging[kStageInKv ? 8 : 2 * kRowsMma * LD];
  uint16_t* qs = kStageInKv ? kv[1][0] : staging;
  uint16_t* dos = kStageInKv ? kv[1][0] : staging + kRowsMma * LD;
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t q0 = int64_t{gridDim.y - 1 - blockIdx.y} * kRows;
  int64_t wq0[kSlabs], wp0[kSlabs];  // each slab's first row, and its position
  slab_rows(wq0, q0, warp);
  slab_positions(wp0, wq0, qr);
  const bool vec = aligned16(qkv) && aligned16(dout);
  const int64_t key_end = block_key_end(qr, q0, kRows);
  fetch_kv<HS, kBwdTile>(kv[0][0], kv[0][1], 0, hd, T, vec);  // in flight while q, dout, D load
  const int64_t rows = qr.rows;

  uint32_t qf[kSlabs][HS / 16][4], dof[kSlabs][HS / 16][4];
  float lse2[kSlabs][2], D[kSlabs][2];  // per row: lse in base 2, and D
  // The 64 staged rows from h0 into their bf16 copy ([b*h][rows][HS]), and this warp's 16 of them
  // into its A fragments.
  const auto take_rows = [&](uint32_t(&frag)[HS / 16][4], uint16_t* copy, const uint16_t* staged,
                             int64_t h0) {
    constexpr int kChunks = HS / 8;  // 16-byte pieces of a row (the copies are 16-byte aligned)
    for (int e = static_cast<int>(threadIdx.x); e < kRowsMma * kChunks; e += kThreadsMma) {
      const int64_t q = h0 + e / kChunks;
      if (q >= rows) continue;
      uint32_t w[4];
      load16(w, staged + e / kChunks * LD + e % kChunks * 8);
      store16(copy + (bh * rows + q) * HS + e % kChunks * 8, w);
    }
    for (int k = 0; k < HS / 16; ++k) load_a(frag[k], staged + 16 * warp * LD + k * 16, LD);
  };
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i) {
    const int64_t h0 = q0 + int64_t{kRowsMma} * i;  // the 64 rows of slabs i
    if (i > 0) __syncthreads();  // every warp has read the previous rows' fragments
    load_tile<HS, kRowsMma>(
        qs, LD, h0, rows, [&](int64_t q) { return hd.q(qr.position(q)); }, scale, vec);
    if constexpr (kStageInKv) {  // q's turn in the buffer
      __syncthreads();
      take_rows(qf[i], q_copy, qs, h0);
      __syncthreads();
    }
    load_tile<HS, kRowsMma>(
        dos, LD, h0, rows, [&](int64_t q) { return dout + qr.o(hd, q); }, 1.0f, vec);
    for (int r = 0; r < 2; ++r) {
      const int64_t row = wq0[i] + g + 8 * r;
      float d_part = 0.0f;
      if (row < rows)
        for (int d = t; d < HS; d += 4)
          d_part += dout[qr.o(hd, row) + d] * load_in(out + qr.o(hd, row) + d);
      D[i][r] = group_sum(d_part);
      // Rows past the last (zero q and dout) take lse +inf: their p is then 2^-inf = 0, with no
      // test.
      lse2[i][r] = row < rows ? lse[bh * rows + row] * kLog2e : INFINITY;
      if (t == 0 && row < rows) dsum[bh * rows + row] = D[i][r];
    }
    __syncthreads();
    if constexpr (!kStageInKv) take_rows(qf[i], q_copy, qs, h0);
    take_rows(dof[i], do_copy, dos, h0);
  }
  if constexpr (kStageInKv) __syncthreads();  // every warp has its fragments: walk_kv may fetch
  float dq[kSlabs][HS / 8][4] = {};

  walk_kv<HS, kBwdTile>(
      kv, key_end, hd, T, vec, [&](int64_t k0, const uint16_t* kt, const uint16_t* vt) {
        bool live[kSlabs];
        if (!slabs_live(live, wp0, k0)) return;
        float s[kSlabs][kBwdTile / 8][4], dp[kSlabs][kBwdTile / 8][4];
        scores_slabs<HS, kBwdTile, kSlabs>(s, qf, kt, LD, live);    // S = Q K^T
        scores_slabs<HS, kBwdTile, kSlabs>(dp, dof, vt, LD, live);  // dP = dO V^T
        uint32_t ds[kSlabs][kBwdTile / 8][2];
        TRAINER_UNROLL
        for (int i = 0; i < kSlabs; ++i) {
          if (!live[i]) continue;
          if (k0 + kBwdTile - 1 > wp0[i])  // diagonal: keys after the row masked
            mask_after_row<kBwdTile>(s[i], static_cast<int>(wp0[i] - k0) + g - 2 * t);
          for (int n = 0; n < kBwdTile / 8; ++n)
            for (int e = 0; e < 4; ++e) {
              const int r = e / 2;
              const float p = exp2_ftz(fmaf(s[i][n][e], kLog2e, -lse2[i][r]));
              s[i][n][e] = p * (dp[i][n][e] - D[i][r]);  // dS (dq's 1/sqrt(HS) at the end)
            }
          pack_c<kBwdTile>(ds[i], s[i]);
        }
        accumulate_slabs<HS, kBwdTile, kSlabs>(dq, ds, kt, LD, live);  // dq += dS K
      });
  TRAINER_UNROLL
  for (int i = 0; i < kSlabs; ++i)
    for (int r = 0; r < 2; ++r) {
      const int64_t row = wq0[i] + g + 8 * r;
      if (row < rows) store_row<HS>(dqkv + (hd.q(qr.position(row)) - qkv), dq[i], r, scale);
    }
}

// ---- dk, dv: one block per (64 keys, b*h), walking the 32-query tiles at and after its keys:
// the dq kernel's bf16 copies of q (pre-scaled) and dout, through two buffers each, tile j + 1
// fetched by cp.async while tile j is multiplied (as walk_kv does for keys).
template <int HS, class QkvT, class DqkvT>
__global__ void __launch_bounds__(kThreadsMma, kMinBlocksOf<HS, 1>)
    mma_backward_dkdv_kernel(DqkvT* dqkv, const float* dsum, const uint16_t* q_copy,
                             const uint16_t* do_copy, const QkvT* qkv, const float* lse, int64_t T,
                             int64_t C, int64_t NH, QueryRows qr) {
  constexpr int LD = HS + kPad;
  // This block's k and v rows first (then read into fragments), then two buffers each of the
  // tiles' q and dout.
  __shared__ __align__(16) uint16_t region[2 * kRowsMma * LD];
  static_assert(4 * kBwdTile <= 2 * kRowsMma, "two q and two dout tiles fit the region");
  __shared__ float col_lse2[2][kBwdTile], col_d[2][kBwdTile];
  const int64_t bh = blockIdx.x;
  const AttentionHead<HS, QkvT> hd{qkv, T, C, bh / NH, bh % NH};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k0 = int64_t{blockIdx.y} * kRowsMma, wk0 = k0 + 16 * warp;
  const int64_t key[2] = {wk0 + g, wk0 + g + 8};
  const bool vec = aligned16(qkv);

  uint16_t* own_k = region;
  uint16_t* own_v = own_k + kRowsMma * LD;
  load_tile<HS, kRowsMma>(
      own_k, LD, k0, T, [&](int64_t j) { return hd.k(j); }, 1.0f, vec);
  load_tile<HS, kRowsMma>(
      own_v, LD, k0, T, [&](int64_t j) { return hd.v(j); }, 1.0f, vec);
  __syncthreads();
  uint32_t kf[HS / 16][4], vf[HS / 16][4];  // this warp's 16 keys and values as A fragments
  for (int k = 0; k < HS / 16; ++k) {
    load_a(kf[k], own_k + 16 * warp * LD + k * 16, LD);
    load_a(vf[k], own_v + 16 * warp * LD + k * 16, LD);
  }
  __syncthreads();  // the own rows are in registers: the region takes the tiles
  // Buffer b of the tiles' q ([query][d], pre-scaled) and dout (an address, not an array of
  // pointers, which a run-time index would move to local memory).
  const auto qs = [&](int b) { return region + b * kBwdTile * LD; };
  const auto dos = [&](int b) { return region + (2 + b) * kBwdTile * LD; };
  const int64_t rows = qr.rows;
  const uint16_t* q_rows = q_copy + bh * rows * HS;
  const uint16_t* do_rows = do_copy + bh * rows * HS;
  // The query rows from the tile holding the first at or after position k0 (each tile's 32 rows
  // are consecutive positions: the launchers take 32 | L).
  const int64_t first = qr.first_row_at(k0) / kBwdTile * kBwdTile;
  // Tile j (query rows first + kBwdTile * j ...) into buffers j % 2: q and dout as one cp.async
  // group (the copies are 16-byte aligned: the scratch's contract, as the dq kernel's stores
  // assume), the queries' lse (base 2) and D by plain loads.
  const auto fetch = [&](int j) {
    const int64_t i0 = first + int64_t{j} * kBwdTile;
    fetch_tile<HS, kBwdTile>(
        qs(j % 2), LD, i0, rows, [&](int64_t i) { return q_rows + i * HS; }, true);
    fetch_tile<HS, kBwdTile>(
        dos(j % 2), LD, i0, rows, [&](int64_t i) { return do_rows + i * HS; }, true);
    cp_async_commit();
    if (threadIdx.x < kBwdTile) {  // rows past the last take lse +inf: their p is 2^-inf = 0
      const int64_t i = i0 + threadIdx.x;
      col_lse2[j % 2][threadIdx.x] = i < rows ? lse[bh * rows + i] * kLog2e : INFINITY;
      col_d[j % 2][threadIdx.x] = i < rows ? dsum[bh * rows + i] : 0.0f;
    }
  };
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  const int tiles = static_cast<int>((rows - first + kBwdTile - 1) / kBwdTile);
  if (tiles > 0) fetch(0);
  for (int j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      fetch(j + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile j is in buffers j % 2, every thread's copies and loads
    // the tile's first position (rows past the last: any, their p is 0)
    const int64_t p0 = qr.position(first + int64_t{j} * kBwdTile);
    const uint16_t *qt = qs(j % 2), *dot = dos(j % 2);
    const float *cl = col_lse2[j % 2], *cd = col_d[j % 2];
    if (p0 + kBwdTile - 1 >= wk0) {  // else every query of the tile is before this warp's keys
      float s[kBwdTile / 8][4], dp[kBwdTile / 8][4];
      scores<HS, kBwdTile>(s, kf, qt, LD);    // S^T = K Q^T
      scores<HS, kBwdTile>(dp, vf, dot, LD);  // dP^T = V dO^T
      if (p0 < wk0 + 15)                      // diagonal: queries before the key masked
        mask_before_row<kBwdTile>(s, static_cast<int>(wk0 - p0) + g - 2 * t);
      for (int n = 0; n < kBwdTile / 8; ++n)
        for (int e = 0; e < 4; ++e) {
          const int c = n * 8 + 2 * t + e % 2;  // the query's column in the tile
          const float p = exp2_ftz(fmaf(s[n][e], kLog2e, -cl[c]));
          s[n][e] = p;
          // q was pre-scaled, so dS^T q already carries dk's 1/sqrt(HS)
          dp[n][e] = p * (dp[n][e] - cd[c]);
        }
      uint32_t pt[kBwdTile / 8][2], dst[kBwdTile / 8][2];
      pack_c<kBwdTile>(pt, s);
      pack_c<kBwdTile>(dst, dp);
      accumulate<HS, kBwdTile>(dv, pt, dot, LD);  // dv += P^T dO
      accumulate<HS, kBwdTile>(dk, dst, qt, LD);  // dk += dS^T q
    }
    __syncthreads();  // buffers j % 2 are no longer read: the fetch of tile j + 2 may fill them
  }
  TRAINER_UNROLL
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= T) continue;
    store_row<HS>(dqkv + (hd.k(key[r]) - qkv), dk, r, 1.0f);
    store_row<HS>(dqkv + (hd.v(key[r]) - qkv), dv, r, 1.0f);
  }
}

}  // namespace

namespace {
void check_rows_per_warp(int rows_per_warp) {
  if (rows_per_warp != 16 && rows_per_warp != 32)
    throw std::invalid_argument("mma attention: " + std::to_string(rows_per_warp) +
                                " rows a warp; compiled are 16 and 32");
}
}  // namespace

// Each of its head sizes keeps the flash kernels' row statistics (kFlashHeadSizes).
static_assert(flash_attention_head_size(32) && flash_attention_head_size(64) &&
              flash_attention_head_size(80) && flash_attention_head_size(96) &&
              flash_attention_head_size(128));

bool mma_attention_supports(int64_t head_size) {
  return head_size_in<32, 64, 80, 96, 128>(head_size);
}

template <class OutT, class QkvT>
void mma_attention_forward(OutT* out, float* lse, const QkvT* qkv, int64_t B, int64_t T, int64_t C,
                           int64_t NH, cudaStream_t stream, int rows_per_warp) {
  check_rows_per_warp(rows_per_warp);
  if (B * T == 0) return;
  with_head_size<32, 64, 80, 96, 128>(C / NH, "mma attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    const float scale = attention_scale(HS);
    if constexpr (kMaxSlabsOf<HS> == 2)
      if (rows_per_warp == 32) {
        launch(mma_forward_kernel<HS, 2, OutT, QkvT>, attention_grid(B, T, NH, 2 * kRowsMma),
               kThreadsMma, stream, out, lse, qkv, T, C, NH, scale, whole_sequence(T));
        CUDA_CHECK_LAUNCH("mma_forward_kernel");
        return;
      }
    launch(mma_forward_kernel<HS, 1, OutT, QkvT>, attention_grid(B, T, NH, kRowsMma), kThreadsMma,
           stream, out, lse, qkv, T, C, NH, scale, whole_sequence(T));
    CUDA_CHECK_LAUNCH("mma_forward_kernel");
  });
}

namespace {
// The bf16 copies' place in the scratch: after D [B*NH*T], at a 16-byte boundary.
int64_t copies_offset_floats(int64_t B, int64_t T, int64_t NH) {
  return (B * NH * T + 3) / 4 * 4;
}
uint16_t* copies_of(float* scratch, int64_t B, int64_t T, int64_t NH) {
  return reinterpret_cast<uint16_t*>(scratch + copies_offset_floats(B, T, NH));
}
}  // namespace

int64_t mma_attention_backward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH) {
  return copies_offset_floats(B, T, NH) + B * T * C;  // D, then two bf16 [B*T*C] copies
}

template <class OutT, class QkvT, class DqkvT>
void mma_attention_backward(DqkvT* dqkv, float* scratch, const float* dout, const QkvT* qkv,
                            const OutT* out, const float* lse, int64_t B, int64_t T, int64_t C,
                            int64_t NH, cudaStream_t stream, int rows_per_warp) {
  check_rows_per_warp(rows_per_warp);
  if (B * T == 0) return;
  with_head_size<32, 64, 80, 96, 128>(C / NH, "mma attention", [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    const float scale = attention_scale(HS);
    uint16_t* q_copy = copies_of(scratch, B, T, NH);
    uint16_t* do_copy = q_copy + B * T * C;
    bool launched = false;
    if constexpr (kMaxSlabsOf<HS> == 2)
      if (rows_per_warp == 32) {
        launch(mma_backward_dq_kernel<HS, 2, OutT, QkvT, DqkvT>,
               attention_grid(B, T, NH, 2 * kRowsMma), kThreadsMma, stream, dqkv, scratch, q_copy,
               do_copy, dout, qkv, out, lse, T, C, NH, scale, whole_sequence(T));
        launched = true;
      }
    if (!launched)
      launch(mma_backward_dq_kernel<HS, 1, OutT, QkvT, DqkvT>, attention_grid(B, T, NH, kRowsMma),
             kThreadsMma, stream, dqkv, scratch, q_copy, do_copy, dout, qkv, out, lse, T, C, NH,
             scale, whole_sequence(T));
    CUDA_CHECK_LAUNCH("mma_backward_dq_kernel");
    launch(mma_backward_dkdv_kernel<HS, QkvT, DqkvT>, attention_grid(B, T, NH, kRowsMma),
           kThreadsMma, stream, dqkv, static_cast<const float*>(scratch),
           static_cast<const uint16_t*>(q_copy), static_cast<const uint16_t*>(do_copy), qkv, lse, T,
           C, NH, whole_sequence(T));
    CUDA_CHECK_LAUNCH("mma_backward_dkdv_kernel");
  });
}

bool mma_context_attention_supports(int64_t head_size, int64_t Tl) {
  return mma_attention_supports(head_size) && (Tl / 2) % kBwdTile == 0;
}

namespace {
void check_context_rows(int64_t head_size, int64_t Tl) {
  if (!mma_context_attention_supports(head_size, Tl))
    throw std::invalid_argument("mma context attention: head size " + std::to_string(head_size) +
                                ", chunks of " + std::to_string(Tl / 2) +
                                " rows (needs a multiple of " + std::to_string(kBwdTile) + ")");
}
// The cp launchers' check and head-size dispatch: f(the head size as a constant), nothing for an
// empty batch.
template <class F>
void with_context_rows(int64_t B, int64_t Tl, int64_t C, int64_t NH, F&& f) {
  check_context_rows(C / NH, Tl);
  if (B * Tl == 0) return;
  with_head_size<32, 64, 80, 96, 128>(C / NH, "mma attention", f);
}
}  // namespace

template <class OutT, class QkvT>
void mma_context_attention_forward(OutT* out, float* lse, const QkvT* seq, int64_t rank, int64_t cp,
                                   int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                   cudaStream_t stream) {
  with_context_rows(B, Tl, C, NH, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    launch(mma_forward_kernel<HS, 1, OutT, QkvT>, attention_grid(B, Tl, NH, kRowsMma), kThreadsMma,
           stream, out, lse, seq, cp * Tl, C, NH, attention_scale(HS), context_rows(rank, cp, Tl));
    CUDA_CHECK_LAUNCH("mma_forward_kernel (context parallel)");
  });
}

template <class OutT, class QkvT>
void mma_context_attention_backward(float* dseq, float* scratch, const float* dout, const QkvT* seq,
                                    const OutT* out, const float* lse, int64_t rank, int64_t cp,
                                    int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                    cudaStream_t stream) {
  with_context_rows(B, Tl, C, NH, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    const QueryRows rows = context_rows(rank, cp, Tl);
    const int64_t T = cp * Tl;
    uint16_t* q_copy = copies_of(scratch, B, Tl, NH);  // (the rank's rows: [b*h][Tl][HS])
    uint16_t* do_copy = q_copy + B * Tl * C;
    launch(mma_backward_dq_kernel<HS, 1, OutT, QkvT, float>, attention_grid(B, Tl, NH, kRowsMma),
           kThreadsMma, stream, dseq, scratch, q_copy, do_copy, dout, seq, out, lse, T, C, NH,
           attention_scale(HS), rows);
    CUDA_CHECK_LAUNCH("mma_backward_dq_kernel (context parallel)");
    launch(mma_backward_dkdv_kernel<HS, QkvT, float>, attention_grid(B, T, NH, kRowsMma),
           kThreadsMma, stream, dseq, static_cast<const float*>(scratch),
           static_cast<const uint16_t*>(q_copy), static_cast<const uint16_t*>(do_copy), seq, lse, T,
           C, NH, rows);
    CUDA_CHECK_LAUNCH("mma_backward_dkdv_kernel (context parallel)");
  });
}

template void mma_attention_forward(uint16_t*, float*, const float*, int64_t, int64_t, int64_t,
                                    int64_t, cudaStream_t, int);
template void mma_attention_forward(float*, float*, const float*, int64_t, int64_t, int64_t,
                                    int64_t, cudaStream_t, int);
template void mma_attention_backward(float*, float*, const float*, const float*, const uint16_t*,
                                     const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t,
                                     int);
template void mma_attention_backward(float*, float*, const float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t,
                                     int);
// bf16 compute with bf16 qkv
template void mma_attention_forward(uint16_t*, float*, const uint16_t*, int64_t, int64_t, int64_t,
                                    int64_t, cudaStream_t, int);
template void mma_attention_backward(float*, float*, const float*, const uint16_t*, const uint16_t*,
                                     const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t,
                                     int);
template void mma_attention_backward(uint16_t*, float*, const float*, const uint16_t*,
                                     const uint16_t*, const float*, int64_t, int64_t, int64_t,
                                     int64_t, cudaStream_t, int);

// context parallelism (bf16 out; dseq fp32)
template void mma_context_attention_forward(uint16_t*, float*, const float*, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void mma_context_attention_forward(uint16_t*, float*, const uint16_t*, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void mma_context_attention_backward(float*, float*, const float*, const float*,
                                             const uint16_t*, const float*, int64_t, int64_t,
                                             int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void mma_context_attention_backward(float*, float*, const float*, const uint16_t*,
                                             const uint16_t*, const float*, int64_t, int64_t,
                                             int64_t, int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace trainer::kernels

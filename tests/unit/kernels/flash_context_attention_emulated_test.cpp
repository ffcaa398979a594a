// Context parallelism's flash attention (kernels/flash_attention.cu's kernels over a cp rank's two
// chunks of query rows, flash_context_attention_*), run on the cpu through cuda_emulation.h,
// against the cpu backend's attention_forward_cp / backward_cp (itself tested against
// whole-sequence attention, tests/unit/cpu/context_attention_test.cpp): each rank's out, its rows'
// log-sum-exp (against float64 over the whole sequence), and dqkv_all (through
// context_grad_from_sequence). The chunk lengths fall below a tile, and across tiles so that one
// tile holds the end of the first chunk and the start of the second (positions jump inside it).
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <type_traits>
#include <vector>

#include "runtime/core/attention_state.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops_optim.h"
#include "tests/unit/kernels/emulated.h"
#include "tests/unit/kernels/kernel_test_util.h"
#define kernels kernels_emulated
#include "kernels/kernels.h"
#undef kernels

using namespace trainer;
namespace emu = trainer::kernels_emulated;
using namespace trainer::kernel_test;

namespace {

constexpr cudaStream_t kStream = nullptr;

size_t sz(int64_t n) {
  return static_cast<size_t>(n);
}

// A poisoned out of the kernels' type (NaN; bf16 bits of a NaN), and its values.
template <class OutT>
std::vector<OutT> poisoned(int64_t n) {
  if constexpr (std::is_same_v<OutT, uint16_t>)
    return std::vector<OutT>(sz(n), uint16_t{0x7fc0});
  else
    return nans(n);
}
template <class OutT>
std::vector<float> values_of(const std::vector<OutT>& v) {
  if constexpr (std::is_same_v<OutT, uint16_t>)
    return floats_of(v);
  else
    return v;
}

// Sequence position of local row i of cp rank `rank` (two chunks of L).
int64_t position(int64_t rank, int64_t cp, int64_t L, int64_t i) {
  return context_chunk(rank, cp, i / L) * L + i % L;
}

struct CpCase {
  int64_t cp, B, L, NH, HS;
};

// One rank's forward and backward through the emulated kernels, fp32 or bf16 qkv (then a bf16
// out, as bf16 compute runs them), against the cpu backend on the same values.
// The kernel families: flash (CUDA cores, fp32 or bf16 out) and mma (tensor cores, bf16 out).
enum class Family { flash, mma };

template <class OutT, class QkvT>
void check_rank(Family family, const CpCase& c, int64_t rank, const std::vector<QkvT>& all,
                const std::vector<float>& all_values) {
  const int64_t Tl = 2 * c.L, T = c.cp * Tl, C = c.NH * c.HS, B = c.B, NH = c.NH, cp = c.cp;
  constexpr bool bf16 = std::is_same_v<OutT, uint16_t>;
  const bool mma = family == Family::mma;
  auto dy = randoms(B * Tl * C, 40 + uint32_t(rank));
  std::vector<QkvT> seq(sz(B * T * 3 * C));
  emu::context_to_sequence(seq.data(), all.data(), cp, B, Tl, 3 * C, kStream);
  std::vector<OutT> out = poisoned<OutT>(B * Tl * C);
  auto lse = nans(B * NH * Tl), dseq = nans(B * T * 3 * C);
  auto work = nans(mma ? emu::mma_attention_backward_scratch_floats(B, Tl, C, NH) : B * NH * Tl);
  auto dall = nans(cp * B * Tl * 3 * C);
  bool ran = false;
  if constexpr (bf16)  // (the mma kernels write a bf16 out)
    if (mma) {
      emu::mma_context_attention_forward(out.data(), lse.data(), seq.data(), rank, cp, B, Tl, C, NH,
                                         kStream);
      emu::mma_context_attention_backward(dseq.data(), work.data(), dy.data(), seq.data(),
                                          out.data(), lse.data(), rank, cp, B, Tl, C, NH, kStream);
      ran = true;
    }
  REQUIRE((ran || !mma));
  if (!ran) {
    emu::flash_context_attention_forward(out.data(), lse.data(), seq.data(), rank, cp, B, Tl, C, NH,
                                         kStream);
    emu::flash_context_attention_backward(dseq.data(), work.data(), dy.data(), seq.data(),
                                          out.data(), lse.data(), rank, cp, B, Tl, C, NH, kStream);
  }
  emu::context_grad_from_sequence(dall.data(), dseq.data(), rank, cp, B, Tl, C, kStream);

  cpu::CpuBackend ref;
  const ContextSplit split{int(rank), int(cp)};
  std::vector<float> in = all_values, rout(sz(B * Tl * C)), ratt(sz(B * NH * Tl * T));
  std::vector<float> rdall = nans(cp * B * Tl * 3 * C);
  ref.attention_forward_cp(host(rout, {B, Tl, C}), host(ratt, {B, NH, Tl, T}),
                           host(in, {cp, B, Tl, 3 * C}), split, int(NH));
  std::vector<float> out_values = values_of(out);
  // backward from the out the kernels wrote (bf16: rounded), as the model runs it
  ref.attention_backward_cp(host(rdall, {cp, B, Tl, 3 * C}), host(dy, {B, Tl, C}),
                            host(in, {cp, B, Tl, 3 * C}), host(out_values, {B, Tl, C}),
                            host(ratt, {B, NH, Tl, T}), split, int(NH));

  // the float64 log-sum-exp of the whole sequence, at this rank's positions
  std::vector<float> seq_values(sz(B * T * 3 * C));
  emu::context_to_sequence(seq_values.data(), all_values.data(), cp, B, Tl, 3 * C, kStream);
  const std::vector<float> whole = lse_float64(seq_values, B, T, NH, c.HS);
  std::vector<float> rlse(lse.size());
  for (int64_t bh = 0; bh < B * NH; ++bh)
    for (int64_t i = 0; i < Tl; ++i)
      rlse[sz(bh * Tl + i)] = whole[sz(bh * T + position(rank, cp, c.L, i))];

  const double out_err = rel_error(out_values, rout), lse_err = rel_error(lse, rlse),
               grad_err = rel_error(dall, rdall);
  INFO("out " << out_err << ", lse " << lse_err << ", dqkv_all " << grad_err);
  // (bf16 out: the kernels take rowsum(dout * out) from the rounded out, the cpu from the
  // probabilities; mma: bf16 products. The tolerances of the whole-sequence kernels' tests.)
  CHECK(out_err < (bf16 ? 1e-2 : 1e-5));
  CHECK(lse_err < (mma ? 1e-2 : 1e-5));
  CHECK(grad_err < (mma ? 2e-2 : bf16 ? 1e-2 : 1e-5));
}

}  // namespace

TEST_CASE("flash_context_parallel_attention_matches_cpu_backend_in_emulation",
          "[kernels][attention][cp]") {
  // (kTile 32 at head size <= 64, 16 above)
  for (const CpCase& c : {CpCase{2, 1, 5, 2, 16},    // each chunk shorter than a tile
                          CpCase{3, 2, 3, 1, 32},    // three ranks, odd chunks
                          CpCase{2, 1, 40, 1, 64},   // a tile spans both chunks
                          CpCase{2, 1, 24, 1, 128},  // 16-row tiles across both chunks
                          CpCase{4, 1, 16, 1, 80}})  // exactly one tile a chunk
    for (const bool bf16 : {false, true}) {
      const int64_t C = c.NH * c.HS, Tl = 2 * c.L;
      const std::vector<float> all = randoms(c.cp * c.B * Tl * 3 * C, 30, -2, 2);
      const std::vector<uint16_t> all16 = bf16_bits_of(all);
      for (int64_t rank = 0; rank < c.cp; ++rank) {
        INFO("cp " << c.cp << " rank " << rank << ", B " << c.B << ", L " << c.L << ", NH " << c.NH
                   << ", HS " << c.HS << (bf16 ? ", bf16" : ", fp32"));
        if (bf16)
          check_rank<uint16_t>(Family::flash, c, rank, all16, floats_of(all16));
        else
          check_rank<float>(Family::flash, c, rank, all, all);
      }
    }
}

// The tensor-core kernels (flash_attention_mma.cu, mma.sync emulated lane by lane) over chunks of
// whole 32-row tiles, bf16 out, from an fp32 and a bf16 qkv; and the chunk lengths they refuse.
TEST_CASE("mma_context_parallel_attention_matches_cpu_backend_in_emulation",
          "[kernels][attention][cp]") {
  // (64-key forward tiles to head size 64, 32 above; 64-row blocks: at L 32 one holds both
  // chunks)
  for (const CpCase& c : {CpCase{2, 2, 32, 2, 32}, CpCase{2, 1, 64, 1, 64},
                          CpCase{3, 1, 32, 1, 128}, CpCase{2, 1, 32, 1, 80}})
    for (const bool bf16_qkv : {false, true}) {
      if (bf16_qkv && c.HS > 64) continue;  // (a bf16 qkv at the smaller sizes: emulation time)
      const int64_t C = c.NH * c.HS, Tl = 2 * c.L;
      const std::vector<float> all = randoms(c.cp * c.B * Tl * 3 * C, 31, -1, 1);
      const std::vector<uint16_t> all16 = bf16_bits_of(all);
      for (int64_t rank = 0; rank < c.cp; ++rank) {
        INFO("cp " << c.cp << " rank " << rank << ", B " << c.B << ", L " << c.L << ", NH " << c.NH
                   << ", HS " << c.HS << (bf16_qkv ? ", bf16 qkv" : ", fp32 qkv"));
        if (bf16_qkv)
          check_rank<uint16_t>(Family::mma, c, rank, all16, floats_of(all16));
        else
          check_rank<uint16_t>(Family::mma, c, rank, all, all);
      }
    }
  CHECK(emu::mma_context_attention_supports(64, 64));
  CHECK_FALSE(emu::mma_context_attention_supports(64, 48));  // chunks of 24 rows
  CHECK_FALSE(emu::mma_context_attention_supports(16, 64));  // no mma kernel at head size 16
  std::vector<uint16_t> out(16 * 64), seq(2 * 48 * 3 * 64);
  std::vector<float> lse(48);
  CHECK_THROWS_WITH(emu::mma_context_attention_forward(out.data(), lse.data(), seq.data(), 0, 2, 1,
                                                       48, 64, 1, kStream),
                    Catch::Contains("chunks of 24 rows"));
}

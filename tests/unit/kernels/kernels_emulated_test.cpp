// Every kernel of kernels/*.cu, its launcher and launch geometry included, run on the cpu through
// cuda_emulation.h and compared with the cpu backend on random inputs: the same checks as
// tests/unit/cuda (fp32 relative error < 1e-5, outputs poisoned with NaN first), available on
// machines without a GPU. What the emulation cannot see (cuBLASLt, streams, the device's own
// float rounding of expf/tanhf) is left to tests/unit/cuda.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/core/fp8_recipe.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/fp8.h"
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

constexpr double kTol = 1e-5;
const cudaStream_t kStream = nullptr;

size_t sz(int64_t n) {
  return static_cast<size_t>(n);
}

}  // namespace

TEST_CASE("emulated_layernorm_gelu_bias_kernels_match_cpu", "[kernels]") {
  cpu::CpuBackend ref;
  const int64_t N = 601, C = 72;  // 601 rows: a partial block of 8 warps, 3 row chunks
  // Forward: C 72 (the general kernel), 256 and 768 (rows held in registers, 2 and 6 vectors a
  // lane; the vectors hold aligned data, as every std::vector's), and 768 with a bias and an
  // input that are not 16-byte aligned (the general kernel again).
  for (const auto& [Nf, Cf, offset] :
       {std::tuple<int64_t, int64_t, int64_t>{N, C, 0}, {N, 256, 0}, {37, 768, 0}, {37, 768, 1}}) {
    INFO(Nf << " rows, C " << Cf << ", offset " << offset);
    auto x = randoms(Nf * Cf + offset, 1, -2, 3), w = randoms(Cf, 2), b = randoms(Cf + offset, 3);
    auto y = nans(Nf * Cf), mean = nans(Nf), rstd = nans(Nf);
    emu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data() + offset, w.data(),
                           b.data() + offset, Nf, Cf, kStream);
    std::vector<float> ry(y.size()), rmean(mean.size()), rrstd(rstd.size());
    std::vector<float> xs(x.begin() + offset, x.end()), bs(b.begin() + offset, b.end());
    ref.layernorm_forward(host(ry, {Nf, Cf}), host(rmean, {Nf}), host(rrstd, {Nf}),
                          host(xs, {Nf, Cf}), host(w, {Cf}), host(bs, {Cf}));
    check_close(y, ry, kTol, "layernorm out");
    check_close(mean, rmean, kTol, "layernorm mean");
    check_close(rstd, rrstd, kTol, "layernorm rstd");
    // bf16 out: the fp32 out rounded, bit for bit
    std::vector<uint16_t> y16(y.size(), 0x7fc0);
    emu::layernorm_forward(y16.data(), mean.data(), rstd.data(), x.data() + offset, w.data(),
                           b.data() + offset, Nf, Cf, kStream);
    CHECK(y16 == bf16_bits_of(y));
  }

  // Backward, 32 rows per block (601 rows: 19 chunks, 100: 4, 77: 3; the last partial), with
  // columns fewer than the block's threads (72), more (300), and 768 (rows held in registers,
  // 4 warps a block); then each output alone.
  std::vector<float> scratch;
  for (const auto& [Nb, Cb] : {std::pair{N, C}, std::pair{int64_t{100}, int64_t{300}},
                               std::pair{int64_t{77}, int64_t{768}}}) {
    INFO(Nb << " rows, C " << Cb);
    auto bx = randoms(Nb * Cb, 15, -2, 3), bw = randoms(Cb, 16), bdy = randoms(Nb * Cb, 17);
    auto bmean = randoms(Nb, 18), brstd = randoms(Nb, 19, 0.5f, 2);
    auto dx = randoms(Nb * Cb, 5), dw = randoms(Cb, 6), db = randoms(Cb, 7);
    auto rdx = dx, rdw = dw, rdb = db;
    scratch.assign(static_cast<size_t>(emu::column_sums_scratch_floats(Nb, Cb)), NAN);
    auto backward = [&](float* dinp, uint16_t* dinp_bf16, float* dweight, float* dbias) {
      emu::layernorm_backward(dinp, dinp_bf16, dweight, dbias, bdy.data(), bx.data(), bw.data(),
                              bmean.data(), brstd.data(), scratch.data(), Nb, Cb, kStream);
    };
    auto reference = [&] {
      ref.layernorm_backward(host(rdx, {Nb, Cb}), host(rdw, {Cb}), host(rdb, {Cb}),
                             host(bdy, {Nb, Cb}), host(bx, {Nb, Cb}), host(bw, {Cb}),
                             host(bmean, {Nb}), host(brstd, {Nb}));
    };
    backward(dx.data(), nullptr, dw.data(), db.data());
    reference();
    check_close(dx, rdx, kTol, "layernorm dinp");
    check_close(dw, rdw, kTol, "layernorm dweight");
    check_close(db, rdb, kTol, "layernorm dbias");
    // each output alone: all three added a second time
    backward(nullptr, nullptr, dw.data(), nullptr);
    backward(dx.data(), nullptr, nullptr, nullptr);
    backward(nullptr, nullptr, nullptr, db.data());
    reference();
    check_close(dx, rdx, kTol, "layernorm dinp alone, added twice");
    check_close(dw, rdw, kTol, "layernorm dweight alone, added twice");
    check_close(db, rdb, kTol, "layernorm dbias alone, added twice");
    // dinp_bf16: the new dinp rounded, bit for bit, and dinp as without it
    std::vector<uint16_t> dx16(dx.size(), 0x7fc0);
    auto dx_plain = dx;
    backward(dx.data(), dx16.data(), nullptr, nullptr);
    backward(dx_plain.data(), nullptr, nullptr, nullptr);
    CHECK(dx == dx_plain);
    CHECK(dx16 == bf16_bits_of(dx));
  }

  const int64_t n = 3000;
  auto gx = randoms(n, 8, -5, 5), gdy = randoms(n, 9), gdx = randoms(n, 10), gy = nans(n);
  auto rgy = gy, rgdx = gdx;
  emu::gelu_forward(gy.data(), gx.data(), n, kStream);
  emu::gelu_backward(gdx.data(), gx.data(), gdy.data(), n, kStream);
  ref.gelu_forward(host(rgy, {n}), host(gx, {n}));
  ref.gelu_backward(host(rgdx, {n}), host(gx, {n}), host(gdy, {n}));
  check_close(gy, rgy, kTol, "gelu out");
  check_close(gdx, rgdx, kTol, "gelu dinp");

  // bias: dbias += column sums (deterministic order), out += bias; add_bias takes 4 columns a
  // thread, 16 bytes at a time where it can (OC 48; 1100 > 1024 rows: threads walk 2 rows), else
  // one by one (OC 45, a last thread with 1 column; or an unaligned out)
  for (const auto& [rows, OC, offset] :
       {std::tuple<int64_t, int64_t, int64_t>{N, 45, 0}, {1100, 48, 0}, {N, 48, 1}}) {
    INFO(rows << " rows, OC " << OC << ", offset " << offset);
    auto dout = randoms(rows * OC, 11), dbias = randoms(OC, 12);
    auto out = randoms(rows * OC + offset, 13), bias = randoms(OC, 14);
    std::vector<float> want_db = dbias, want_out = out;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t o = 0; o < OC; ++o) {
        want_db[size_t(o)] += dout[size_t(i * OC + o)];
        want_out[size_t(offset + i * OC + o)] += bias[size_t(o)];
      }
    scratch.resize(static_cast<size_t>(emu::column_sums_scratch_floats(rows, OC)));
    emu::bias_backward(dbias.data(), dout.data(), scratch.data(), rows, OC, kStream);
    emu::add_bias(out.data() + offset, bias.data(), rows, OC, kStream);
    check_close(dbias, want_db, kTol, "bias_backward");
    CHECK(out == want_out);  // one addition an element: exact
  }
}

// The fused GELU ops' fallback kernels (cuda without cuBLASLt's epilogue) against the cpu
// backend's fused ops on the same fp32 sums, and the bias gradient of a bf16 dout.
TEST_CASE("emulated_fused_gelu_fallback_kernels_match_cpu", "[kernels][bf16]") {
  cpu::CpuBackend ref;
  const int64_t n = 3000;
  auto sum = randoms(n, 1, -6, 6), g = randoms(n, 2);
  auto bf16 = [](std::vector<uint16_t>& b) {
    return Tensor(b.data(), {static_cast<int64_t>(b.size())}, DType::bf16);
  };

  // fp32, in place as the cuda backend runs it: the sums in pre, then out = gelu(pre)
  auto pre = sum, out = nans(n);
  emu::gelu_forward_keep_input(out.data(), pre.data(), pre.data(), n, kStream);
  std::vector<float> rout(out.size());
  ref.gelu_forward(host(rout, {n}), host(sum, {n}));
  check_close(out, rout, kTol, "fp32 gelu out");
  CHECK(pre == sum);
  auto dpre = g;  // the GEMM's output, scaled in place
  emu::gelu_backward_from_sum(dpre.data(), pre.data(), dpre.data(), n, kStream);
  std::vector<float> rdpre(dpre.size());
  ref.gelu_backward(host(rdpre, {n}), host(sum, {n}), host(g, {n}));
  check_close(dpre, rdpre, kTol, "fp32 dpre");

  // bf16: each output rounded once from fp32, the derivative at the rounded pre
  std::vector<uint16_t> out16(sz(n), 0x7fc0), pre16(out16), rout16(out16.size()),
      rpre16(out16.size());
  emu::gelu_forward_keep_input(out16.data(), pre16.data(), sum.data(), n, kStream);
  ref.gelu_forward(bf16(rout16), host(sum, {n}));
  ref.round_to_bf16(bf16(rpre16), host(sum, {n}));
  CHECK(pre16 == rpre16);
  check_close(floats_of(out16), floats_of(rout16), 1e-2, "bf16 gelu out");
  std::vector<uint16_t> dpre16(sz(n), 0x7fc0);
  emu::gelu_backward_from_sum(dpre16.data(), pre16.data(), g.data(), n, kStream);
  auto pre_wide = floats_of(pre16);
  std::vector<float> rd(sz(n));
  ref.gelu_backward(host(rd, {n}), host(pre_wide, {n}), host(g, {n}));
  check_close(floats_of(dpre16), floats_of(bf16_bits_of(rd)), 1e-2, "bf16 dpre");

  // dbias of a bf16 dout: the column sums of its values
  const int64_t N = 601, OC = 40;
  auto dout = bf16_bits_of(randoms(N * OC, 3));
  auto dbias = randoms(OC, 4), want = dbias;
  const auto wide = floats_of(dout);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) want[sz(o)] += wide[sz(i * OC + o)];
  std::vector<float> scratch(static_cast<size_t>(emu::column_sums_scratch_floats(N, OC)));
  emu::bias_backward(dbias.data(), dout.data(), scratch.data(), N, OC, kStream);
  check_close(dbias, want, kTol, "bias_backward of a bf16 dout");
}

namespace {

// The reference attention kernels (attention.cu) against the cpu backend at sequence length T.
void check_reference_attention(int64_t T) {
  cpu::CpuBackend ref;
  const int64_t B = 2, NH = 3, HS = 8, C = NH * HS;
  auto qkv = randoms(B * T * 3 * C, 1, -2, 2), dy = randoms(B * T * C, 2);
  auto dqkv = nans(B * T * 3 * C), out = nans(B * T * C), att = nans(B * NH * T * T);
  std::vector<float> dpre(att.size()), rout(out.size()), ratt(att.size()), rdqkv = dqkv;
  emu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, kStream);
  emu::attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), dpre.data(), B, T, C, NH,
                          kStream);
  ref.attention_forward(host(rout, {B, T, C}), host(ratt, {B, NH, T, T}), host(qkv, {B, T, 3 * C}),
                        int(NH));
  ref.attention_backward(host(rdqkv, {B, T, 3 * C}), host(dy, {B, T, C}), host(qkv, {B, T, 3 * C}),
                         host(rout, {B, T, C}), host(ratt, {B, NH, T, T}), int(NH));
  check_close(out, rout, kTol, "attention out");
  check_close(att, ratt, kTol, "attention att");
  check_close(dqkv, rdqkv, kTol, "attention dqkv");
}

}  // namespace

// Rows of 13 keys (all in one warp of the block) and of up to 70 (three warps, each with keys:
// block_reduce's max then sum must not overwrite the warps' partial maxima before all have read).
TEST_CASE("emulated_reference_attention_kernels_match_cpu", "[kernels]") {
  for (const int64_t T : {13, 70}) {
    INFO("T=" << T);
    check_reference_attention(T);
  }
}

// Each cp rank's out, att and dqkv_all (its share of every rank's gradient) as the cpu backend's
// (itself tested against whole-sequence attention, tests/unit/cpu/context_attention_test.cpp);
// from bf16 qkv too (the cpu reading the same bf16 values; out rounded to bf16 once).
TEST_CASE("emulated_context_parallel_attention_kernels_match_cpu", "[kernels][cp]") {
  cpu::CpuBackend ref;
  const int64_t cp = 3, B = 2, NH = 2, HS = 8, C = NH * HS;
  // Tl=6 (every row's keys in one warp) and Tl=24: up to 72 keys, three warps with keys each
  for (const int64_t L : {3, 12}) {
    const int64_t Tl = 2 * L, T = cp * Tl;
    const std::vector<float> all = randoms(cp * B * Tl * 3 * C, 3, -2, 2);
    const std::vector<uint16_t> all16 = bf16_bits_of(all);
    for (const bool bf16 : {false, true})
      for (int64_t rank = 0; rank < cp; ++rank) {
        INFO((bf16 ? "bf16" : "fp32") << " qkv, Tl " << Tl << ", cp rank " << rank << " of " << cp);
        auto dy = randoms(B * Tl * C, 4 + uint32_t(rank));
        auto att = nans(B * NH * Tl * T), dall = nans(cp * B * Tl * 3 * C);
        auto dseq = nans(B * T * 3 * C), dpre = nans(B * NH * Tl * T);
        std::vector<float> out;
        if (bf16) {
          std::vector<uint16_t> seq(sz(B * T * 3 * C), 0xffff), out16(sz(B * Tl * C), 0xffff);
          emu::context_to_sequence(seq.data(), all16.data(), cp, B, Tl, 3 * C, kStream);
          emu::context_attention_forward(out16.data(), att.data(), seq.data(), rank, cp, B, Tl, C,
                                         NH, kStream);
          emu::context_attention_backward(dall.data(), dseq.data(), dpre.data(), dy.data(),
                                          seq.data(), att.data(), rank, cp, B, Tl, C, NH, kStream);
          out = floats_of(out16);
        } else {
          auto seq = nans(B * T * 3 * C);
          out = nans(B * Tl * C);
          emu::context_to_sequence(seq.data(), all.data(), cp, B, Tl, 3 * C, kStream);
          emu::context_attention_forward(out.data(), att.data(), seq.data(), rank, cp, B, Tl, C, NH,
                                         kStream);
          emu::context_attention_backward(dall.data(), dseq.data(), dpre.data(), dy.data(),
                                          seq.data(), att.data(), rank, cp, B, Tl, C, NH, kStream);
        }
        std::vector<float> in = bf16 ? floats_of(all16) : all;
        std::vector<float> rout(out.size()), ratt(att.size()), rdall(all.size());
        const ContextSplit split{int(rank), int(cp)};
        ref.attention_forward_cp(host(rout, {B, Tl, C}), host(ratt, {B, NH, Tl, T}),
                                 host(in, {cp, B, Tl, 3 * C}), split, int(NH));
        ref.attention_backward_cp(host(rdall, {cp, B, Tl, 3 * C}), host(dy, {B, Tl, C}),
                                  host(in, {cp, B, Tl, 3 * C}), host(rout, {B, Tl, C}),
                                  host(ratt, {B, NH, Tl, T}), split, int(NH));
        check_close(out, rout, bf16 ? 1e-2 : kTol, "cp attention out");
        check_close(att, ratt, kTol, "cp attention att");
        check_close(dall, rdall, kTol, "cp attention dqkv_all");
      }
  }
}

TEST_CASE("emulated_embedding_kernels_match_cpu_with_repeated_and_other_shard_tokens",
          "[kernels]") {
  cpu::CpuBackend ref;
  const int64_t B = 3, T = 9, C = 20, V = 11, maxT = 16, off = 4;
  std::vector<int32_t> tok(static_cast<size_t>(B * T));
  std::mt19937 gen(9);
  // few distinct tokens (repeats), and -1: another vocabulary shard's (no row: wpe only)
  for (auto& t : tok) t = static_cast<int32_t>(gen() % 6) - 1;
  auto wte = randoms(V * C, 1), wpe = randoms(maxT * C, 2), dy = randoms(B * T * C, 3);
  // magnitudes from 1e-4 to 1e4, so that the order of a sum shows in its bits
  for (size_t i = 0; i < dy.size(); ++i) dy[i] *= std::pow(10.0f, float(int(i % 9)) - 4.0f);
  auto dwte = randoms(V * C, 4), dwpe = randoms(maxT * C, 5), out = nans(B * T * C);
  std::vector<float> rout(out.size()), rdwte = dwte, rdwpe = dwpe;
  // scratch left over from earlier use (the backward zeroes the counts it needs)
  std::vector<int32_t> scratch(static_cast<size_t>(emu::embedding_backward_scratch_ints(B * T, V)),
                               -7);
  emu::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), off, B, T, C, V, kStream);
  emu::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), scratch.data(), off, B,
                          T, C, V, kStream);
  ref.embedding_forward(host(rout, {B, T, C}), host(tok, {B, T}), host(wte, {V, C}),
                        host(wpe, {maxT, C}), off);
  ref.embedding_backward(host(rdwte, {V, C}), host(rdwpe, {maxT, C}), host(dy, {B, T, C}),
                         host(tok, {B, T}), off);
  check_close(out, rout, kTol, "embedding out");
  check_close(dwte, rdwte, kTol, "embedding dwte");
  check_close(dwpe, rdwpe, kTol, "embedding dwpe");
  // Bit for bit the sum in position order (the buckets are filled by atomics in any order, then
  // sorted): each token's rows summed first to last, then added to dwte.
  const auto start = randoms(V * C, 4);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t c = 0; c < C; ++c) {
      float g = 0;
      for (int64_t i = 0; i < B * T; ++i)
        if (tok[sz(i)] == v) g += dy[sz(i * C + c)];
      const float want = g == 0 ? start[sz(v * C + c)] : start[sz(v * C + c)] + g;
      INFO("dwte[" << v << "][" << c << "]");
      CHECK(dwte[sz(v * C + c)] == want);
    }
}

// The backward's bucket offsets come from a one-block scan of the token counts, 1024 threads
// each summing a chunk of the vocabulary. Over a vocabulary of exactly 1024 every thread has a
// token, the last one too: the thread that completes the scan's first barrier reads its prefix
// only after the second (scripts/mutate_barriers.sh: without this case, taking that barrier out
// failed no test, since with a small vocabulary the threads that read early have no tokens).
TEST_CASE("emulated_embedding_backward_matches_cpu_over_a_vocabulary_of_1024", "[kernels]") {
  cpu::CpuBackend ref;
  const int64_t B = 2, T = 16, C = 4, V = 1024;
  std::vector<int32_t> tok(static_cast<size_t>(B * T));
  std::mt19937 gen(10);
  for (auto& t : tok) t = static_cast<int32_t>(gen() % V);
  tok[0] = tok[5] = static_cast<int32_t>(V - 1);  // the last thread's token, twice
  auto dy = randoms(B * T * C, 3), dwte = randoms(V * C, 4), dwpe = randoms(T * C, 5);
  std::vector<float> rdwte = dwte, rdwpe = dwpe;
  std::vector<int32_t> scratch(static_cast<size_t>(emu::embedding_backward_scratch_ints(B * T, V)),
                               -7);
  emu::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), scratch.data(), 0, B, T,
                          C, V, kStream);
  ref.embedding_backward(host(rdwte, {V, C}), host(rdwpe, {T, C}), host(dy, {B, T, C}),
                         host(tok, {B, T}), 0);
  check_close(dwte, rdwte, kTol, "embedding dwte");
  check_close(dwpe, rdwpe, kTol, "embedding dwpe");
}

TEST_CASE("emulated_softmax_cross_entropy_matches_cpu_with_ignored_targets_and_padding",
          "[kernels]") {
  cpu::CpuBackend ref;
  const int64_t N = 7;
  // Rows of V classes, then Vp - V padding columns. Rows that start 16-byte aligned are read 16
  // bytes at a time up to a multiple of 8 (bf16) or 4 (fp32) columns: every row here (fp32, Vp
  // 300), every other one (bf16, Vp 300), none after the first (Vp 1003); with a tail of 3
  // columns (V 1003) and several 16-byte groups per thread (V 5000: 1024 threads); and GPT-2's
  // padded vocabulary, where a thread holds more groups than it keeps in registers (the rest
  // fold into its statistics a group at a time).
  const std::pair<int64_t, int64_t> shapes[] = {{300, 300},   {300, 320},   {1003, 1003},
                                                {1003, 1024}, {5000, 5120}, {50257, 50304}};
  for (const auto& [V, Vp] : shapes) {
    INFO("V " << V << ", row length " << Vp);
    auto logits = randoms(N * Vp, 1, -4, 4), rlogits = logits, losses = nans(N);
    std::vector<float> rlosses(losses.size());
    std::vector<int32_t> tgt(static_cast<size_t>(N));
    for (size_t i = 0; i < tgt.size(); ++i)
      tgt[i] = i % 4 == 3 ? -1 : static_cast<int32_t>(i == 6 ? V - 1 : (i * 37) % V);  // last: tail
    emu::softmax_cross_entropy(logits.data(), losses.data(), tgt.data(), N, V, Vp, 0.125f, kStream);
    ref.softmax_cross_entropy(host(rlogits, {N, Vp}), host(rlosses, {N}), host(tgt, {N}), 0.125f,
                              V);
    check_close(losses, rlosses, kTol, "cross-entropy losses");
    check_close(logits, rlogits, kTol, "cross-entropy dlogits");

    // bf16 logits (bf16 compute): the same fp32 math on their values, dlogits rounded once
    std::vector<uint16_t> z16 = bf16_bits_of(randoms(N * Vp, 2, -4, 4)), rz16 = z16;
    auto losses16 = nans(N);
    emu::softmax_cross_entropy(z16.data(), losses16.data(), tgt.data(), N, V, Vp, 0.125f, kStream);
    ref.softmax_cross_entropy(Tensor(rz16.data(), {N, Vp}, DType::bf16), host(rlosses, {N}),
                              host(tgt, {N}), 0.125f, V);
    check_close(losses16, rlosses, kTol, "bf16 cross-entropy losses");
    check_close(floats_of(z16), floats_of(rz16), 1e-2, "bf16 cross-entropy dlogits");
  }
}

// The vocabulary-parallel halves: every shard's stats, gathered in rank order, then every shard's
// finish, fp32 and bf16 logits, against the cpu backend's; with padding in the last shard, a
// shard of padding only (V 200 of 320 in 4: columns 240..319), an ignored row and a target in
// each shard.
TEST_CASE("emulated_vocab_parallel_cross_entropy_matches_cpu", "[kernels]") {
  cpu::CpuBackend ref;
  const int64_t N = 7;
  struct Shape {
    int64_t V, Vp, R;
  };
  const Shape shapes[] = {{300, 320, 2}, {200, 320, 4}, {1003, 1024, 4}, {50257, 50304, 8}};
  for (const Shape& sh : shapes) {
    const int64_t Vl = sh.Vp / sh.R;
    INFO("V " << sh.V << ", Vp " << sh.Vp << ", " << sh.R << " shards");
    std::vector<int32_t> tgt(static_cast<size_t>(N));
    for (size_t i = 0; i < tgt.size(); ++i)
      tgt[i] = i == 2 ? -1 : static_cast<int32_t>((int64_t(i) * Vl + 5 * int64_t(i)) % sh.V);
    for (const bool bf16 : {false, true}) {
      INFO((bf16 ? "bf16" : "fp32") << " logits");
      std::vector<std::vector<float>> z(sz(sh.R)), rz(sz(sh.R));
      std::vector<std::vector<uint16_t>> z16(sz(sh.R)), rz16(sz(sh.R));
      for (int64_t r = 0; r < sh.R; ++r) {
        z[sz(r)] = randoms(N * Vl, 10 + uint32_t(r), -4, 4), rz[sz(r)] = z[sz(r)];
        z16[sz(r)] = bf16_bits_of(z[sz(r)]), rz16[sz(r)] = z16[sz(r)];
      }
      const auto ref_logits = [&](int64_t r) {
        return bf16 ? Tensor(rz16[sz(r)].data(), {N, Vl}, DType::bf16) : host(rz[sz(r)], {N, Vl});
      };
      std::vector<float> stats = nans(sh.R * N * 3), rstats = nans(sh.R * N * 3);
      for (int64_t r = 0; r < sh.R; ++r) {
        const int64_t classes = std::clamp<int64_t>(sh.V - r * Vl, 0, Vl);
        float* st = stats.data() + r * N * 3;
        if (bf16)
          emu::cross_entropy_shard_stats(st, z16[sz(r)].data(), tgt.data(), N, classes, Vl, r * Vl,
                                         kStream);
        else
          emu::cross_entropy_shard_stats(st, z[sz(r)].data(), tgt.data(), N, classes, Vl, r * Vl,
                                         kStream);
        ref.cross_entropy_shard_stats(Tensor(rstats.data() + r * N * 3, {N, 3}, DType::f32),
                                      ref_logits(r), host(tgt, {N}), r * Vl, sh.V);
      }
      for (int64_t r = 0; r < sh.R; ++r) {
        INFO("shard " << r);
        const int64_t classes = std::clamp<int64_t>(sh.V - r * Vl, 0, Vl);
        std::vector<float> losses = nans(N), rlosses = nans(N);
        if (bf16)
          emu::cross_entropy_shard_finish(z16[sz(r)].data(), losses.data(), stats.data(), sh.R,
                                          tgt.data(), N, classes, Vl, r * Vl, sh.V, 0.125f,
                                          kStream);
        else
          emu::cross_entropy_shard_finish(z[sz(r)].data(), losses.data(), stats.data(), sh.R,
                                          tgt.data(), N, classes, Vl, r * Vl, sh.V, 0.125f,
                                          kStream);
        ref.cross_entropy_shard_finish(ref_logits(r), host(rlosses, {N}),
                                       host(rstats, {sh.R, N, 3}), host(tgt, {N}), 0.125f, r * Vl,
                                       sh.V);
        check_close(losses, rlosses, kTol, "vocab-parallel losses");
        if (bf16)
          check_close(floats_of(z16[sz(r)]), floats_of(rz16[sz(r)]), 1e-2,
                      "bf16 vocab-parallel dlogits");
        else
          check_close(z[sz(r)], rz[sz(r)], kTol, "vocab-parallel dlogits");
      }
    }
  }
}

// -inf logits (a masked class) add nothing, wherever they fall, also first in a thread's share of
// the row; a NaN logit makes its row's loss NaN; as in the cpu backend, fp32 and bf16.
TEST_CASE("emulated_softmax_cross_entropy_takes_minus_inf_and_nan_logits_as_the_cpu", "[kernels]") {
  cpu::CpuBackend ref;
  const int64_t N = 3, V = 300, Vp = 304;  // rows 16-byte aligned in fp32 and bf16
  const float inf = std::numeric_limits<float>::infinity();
  auto logits = randoms(N * Vp, 3, -4, 4);
  for (int64_t j : {0, 5, 8, 299}) logits[size_t(j)] = -inf;  // row 0: the first and the last
  for (int64_t j = 0; j < V; j += 3) logits[size_t(Vp + j)] = -inf;  // row 1: a third of it
  logits[size_t(2 * Vp + 77)] = std::nanf("");                       // row 2
  const std::vector<int32_t> tgt = {1, 2, 3};                        // finite target logits
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "fp32") << " logits");
    std::vector<float> losses = nans(N), rlosses(static_cast<size_t>(N), 0.0f), got, want;
    auto z = logits, rz = logits;
    std::vector<uint16_t> z16 = bf16_bits_of(logits), rz16 = z16;
    if (bf16) {
      emu::softmax_cross_entropy(z16.data(), losses.data(), tgt.data(), N, V, Vp, 0.5f, kStream);
      ref.softmax_cross_entropy(Tensor(rz16.data(), {N, Vp}, DType::bf16), host(rlosses, {N}),
                                Tensor(const_cast<int32_t*>(tgt.data()), {N}, DType::i32), 0.5f, V);
      got = floats_of(z16), want = floats_of(rz16);
    } else {
      emu::softmax_cross_entropy(z.data(), losses.data(), tgt.data(), N, V, Vp, 0.5f, kStream);
      ref.softmax_cross_entropy(host(rz, {N, Vp}), host(rlosses, {N}),
                                Tensor(const_cast<int32_t*>(tgt.data()), {N}, DType::i32), 0.5f, V);
      got = z, want = rz;
    }
    REQUIRE(std::isfinite(rlosses[0]));
    REQUIRE(std::isfinite(rlosses[1]));
    CHECK(std::isnan(rlosses[2]));
    check_close(std::vector<float>{losses[0], losses[1]},
                std::vector<float>{rlosses[0], rlosses[1]}, kTol, "losses, rows 0-1");
    CHECK(std::isnan(losses[2]));
    check_close(std::vector<float>(got.begin(), got.begin() + 2 * Vp),
                std::vector<float>(want.begin(), want.begin() + 2 * Vp), bf16 ? 1e-2 : kTol,
                "dlogits, rows 0-1");
  }
}

TEST_CASE("emulated_optimizer_reduction_and_cast_kernels_match_cpu", "[kernels]") {
  cpu::CpuBackend ref;
  const int64_t n = 1500;
  auto p = randoms(n, 1), g = randoms(n, 2), m = randoms(n, 3, -0.1f, 0.1f);
  auto v = randoms(n, 4, 0, 0.01f);
  auto rp = p, rm = m, rv = v;
  AdamWParams hp;
  hp.lr = 1e-2f, hp.weight_decay = 0.1f, hp.step = 3;
  const float bc1 = float(1 - std::pow(double(hp.beta1), 3.0));
  const float bc2 = float(1 - std::pow(double(hp.beta2), 3.0));
  std::vector<uint16_t> copy(static_cast<size_t>(n), 0x7fc0), rcopy(copy.size());
  hp.grad_scale = 0.375f;  // clipping's coefficient
  emu::adamw_step(p.data(), g.data(), m.data(), v.data(), n, hp.lr, hp.beta1, hp.beta2, hp.eps,
                  hp.weight_decay, bc1, bc2, hp.grad_scale, copy.data(), kStream);
  ref.adamw_step(host(rp, {n}), host(g, {n}), host(rm, {n}), host(rv, {n}), hp,
                 Tensor(rcopy.data(), {n}, DType::bf16));
  check_close(p, rp, kTol, "adamw params");
  check_close(m, rm, kTol, "adamw m");
  check_close(v, rv, kTol, "adamw v");
  for (size_t i = 0; i < copy.size(); ++i) {  // the bf16 copy: the emulated params, rounded
    INFO("bf16 copy element " << i);
    CHECK(copy[i] == cpu::bf16_bits_from_float(p[i]));
  }

  auto y = randoms(n, 5), x = randoms(n, 6), ry = y;
  emu::axpy(y.data(), x.data(), 0.5f, n, kStream);
  emu::scale(y.data(), -2.0f, n, kStream);
  ref.axpy(host(ry, {n}), host(x, {n}), 0.5f);
  ref.scale(host(ry, {n}), -2.0f);
  check_close(y, ry, kTol, "axpy then scale");
  emu::fill(y.data() + 1, -3.5f, n - 2, kStream);  // leaves the first and last element
  CHECK(y.front() == ry.front());
  CHECK(y.back() == ry.back());
  for (int64_t i = 1; i < n - 1; ++i) REQUIRE(y[static_cast<size_t>(i)] == -3.5f);
  std::vector<uint16_t> yb(static_cast<size_t>(n), 0x1234);  // bf16: the value's rounded bits
  emu::fill(yb.data() + 1, 1.00390625f, n - 2, kStream);     // 1 + 2^-8: a tie, rounds to even
  CHECK(yb.front() == 0x1234);
  CHECK(yb.back() == 0x1234);
  for (int64_t i = 1; i < n - 1; ++i)
    REQUIRE(yb[static_cast<size_t>(i)] == cpu::bf16_bits_from_float(1.00390625f));
  emu::fill(yb.data(), std::nanf(""), n, kStream);
  for (uint16_t b : yb) REQUIRE(std::isnan(cpu::float_from_bf16_bits(b)));

  std::vector<double> result(1), partials(emu::kReducePartials);
  emu::sum_fp64(result.data(), partials.data(), x.data(), n, true, kStream);
  CHECK(result[0] == Approx(ref.sum_squares(host(x, {n}))).epsilon(1e-12));
  emu::sum_fp64(result.data(), partials.data(), x.data(), n, false, kStream);
  CHECK(result[0] == Approx(ref.sum(host(x, {n}))).epsilon(1e-12));

  // bf16: bit-identical to the cpu rounding, NaN and infinities included
  x[0] = std::nanf(""), x[1] = INFINITY, x[2] = -INFINITY, x[3] = 3.3895314e38f;
  std::vector<uint16_t> bits(static_cast<size_t>(n)), rbits(bits.size());
  std::vector<float> rounded = nans(n), back = nans(n);
  emu::cast_f32_to_bf16(bits.data(), x.data(), n, kStream);
  emu::round_to_bf16_f32(rounded.data(), x.data(), n, kStream);
  emu::cast_bf16_to_f32(back.data(), bits.data(), n, kStream);
  ref.round_to_bf16(Tensor(rbits.data(), {n}, DType::bf16), host(x, {n}));
  CHECK(bits == rbits);
  for (size_t i = 0; i < bits.size(); ++i) {
    INFO("element " << i);
    const uint16_t rb = cpu::bf16_bits_from_float(rounded[i]);
    CHECK(rb == rbits[i]);
    CHECK(cpu::bf16_bits_from_float(back[i]) == rbits[i]);
  }
}

TEST_CASE("emulated_fp8_quantize_with_delayed_scaling_matches_cpu_bit_for_bit", "[kernels][fp8]") {
  const int64_t n = 70'001;  // many blocks of the amax reduction, a ragged last one
  std::vector<float> state(kFp8TensorFloats, 0.0f), ref_state = state;
  std::vector<float> used(2, std::nanf("")), amax(1, std::nanf(""));
  std::vector<float> partials(emu::kReducePartials, std::nanf(""));
  for (int call = 0; call < 3; ++call) {  // fresh (current scaling), then delayed twice
    INFO("call " << call);
    auto x = randoms(n, 10 + uint32_t(call), -3.0f * float(call + 1), 2.0f);
    // the largest magnitude alone, in the upper half of a 4-byte pair (bf16 rounding leaves many
    // ties at the top of the range otherwise)
    x[size_t(12'345 + 2 * call)] = -7.5f * float(call + 1);
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) bits[i] = cpu::bf16_bits_from_float(x[i]);
    std::vector<uint8_t> q(x.size(), 0x7f);
    const std::vector<float> before = state;
    emu::fp8_quantize_delayed(q.data(), bits.data(), n, state.data(), amax.data(), &used[0],
                              &used[1], partials.data(), kStream);
    CHECK(state == before);  // a call reports its amax and leaves the state
    float ref_amax = 0.0f;
    for (uint16_t b : bits) ref_amax = std::fmax(ref_amax, std::fabs(cpu::float_from_bf16_bits(b)));
    CHECK(amax[0] == ref_amax);
    const float scale = cpu::fp8_call_scale(ref_state.data(), ref_amax);
    CHECK(used[0] == scale);
    CHECK(used[1] == 1.0f / scale);
    for (size_t i = 0; i < q.size(); ++i) {
      INFO("element " << i);
      REQUIRE(q[i] == cpu::fp8_e4m3_from_float(cpu::float_from_bf16_bits(bits[i]) * scale));
    }
    emu::fp8_push_amaxes(state.data(), amax.data(), 1, kStream);
    cpu::fp8_push_amax(ref_state.data(), ref_amax);
    CHECK(state == ref_state);
    // a call raises *amax, never lowers it (the calls between two pushes report their max)
    amax[0] = 1e3f;
    emu::fp8_quantize_delayed(q.data(), bits.data(), n, state.data(), amax.data(), &used[0],
                              &used[1], partials.data(), kStream);
    CHECK(amax[0] == 1e3f);
    amax[0] = std::nanf("");  // (the next call's: NaN counts as nothing)
  }
}

// The kernels read 8 elements at a time from a 16-byte aligned input (and write 8 bytes to an
// 8-byte aligned output): the test above. Here an input, and an output, that are not: one by one.
TEST_CASE("emulated_fp8_quantize_of_unaligned_tensors_matches_cpu_bit_for_bit", "[kernels][fp8]") {
  const int64_t n = 4'099;
  auto x = randoms(n + 1, 21, -5.0f, 3.0f);
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = cpu::bf16_bits_from_float(x[i]);
  for (const auto& [in_offset, out_offset] : {std::pair<int, int>{1, 0}, {0, 1}}) {
    INFO("input offset " << in_offset << ", output offset " << out_offset);
    std::vector<float> state(kFp8TensorFloats, 0.0f), used(2), amax(1);
    std::vector<float> partials(emu::kReducePartials);
    std::vector<uint8_t> q(static_cast<size_t>(n + 1), 0x7f);
    emu::fp8_quantize_delayed(q.data() + out_offset, bits.data() + in_offset, n, state.data(),
                              amax.data(), &used[0], &used[1], partials.data(), kStream);
    float ref_amax = 0.0f;
    for (int64_t i = 0; i < n; ++i)
      ref_amax =
          std::fmax(ref_amax, std::fabs(cpu::float_from_bf16_bits(bits[size_t(in_offset + i)])));
    CHECK(amax[0] == ref_amax);
    const float scale = cpu::fp8_call_scale(state.data(), ref_amax);
    for (int64_t i = 0; i < n; ++i) {
      INFO("element " << i);
      REQUIRE(
          q[size_t(out_offset + i)] ==
          cpu::fp8_e4m3_from_float(cpu::float_from_bf16_bits(bits[size_t(in_offset + i)]) * scale));
    }
  }
}

TEST_CASE("emulated_fp8_push_amaxes_matches_cpu_bit_for_bit", "[kernels][fp8]") {
  // 300 tensor parts (more than a block), fresh and used ones, over 20 pushes (past the window),
  // with zero, NaN and infinite amaxes among them.
  const int64_t parts = 300;
  const auto sz = [](int64_t i) { return static_cast<size_t>(i); };
  std::vector<float> states(sz(parts * kFp8TensorFloats), 0.0f), ref = states;
  for (int push = 0; push < 20; ++push) {
    INFO("push " << push);
    auto amaxes = randoms(parts, 40 + uint32_t(push), 0.0f, 50.0f);
    amaxes[sz(push)] = 0.0f;
    amaxes[sz(push + 30)] = std::nanf("");
    amaxes[sz(push + 60)] = INFINITY;
    for (int64_t p = 200; p < parts; ++p)  // these stay fresh for the first 10 pushes
      if (push < 10) amaxes[sz(p)] = 0.0f;
    emu::fp8_push_amaxes(states.data(), amaxes.data(), parts, kStream);
    for (int64_t p = 0; p < parts; ++p)
      cpu::fp8_push_amax(ref.data() + p * kFp8TensorFloats, amaxes[sz(p)]);
    for (size_t i = 0; i < states.size(); ++i) {
      INFO("float " << i);
      REQUIRE(std::memcmp(&states[i], &ref[i], sizeof(float)) == 0);  // NaN histories too
    }
  }
}

TEST_CASE("emulated_moe_row_kernels_match_cpu_with_empty_slots_and_dropped_choices",
          "[kernels][moe]") {
  cpu::CpuBackend ref;
  const int64_t N = 37, K = 2, S = 50, C = 24;
  std::mt19937 gen(5);
  // each slot holds a token or nothing (-1); each choice a slot or nothing (dropped)
  std::vector<int32_t> token(sz(S)), slot(sz(N * K));
  for (auto& t : token) t = gen() % 4 == 0 ? -1 : static_cast<int32_t>(gen() % N);
  for (auto& s : slot) s = gen() % 5 == 0 ? -1 : static_cast<int32_t>(gen() % S);
  auto x = randoms(N * C, 1), scale = randoms(S, 2), y = randoms(S * C, 3),
       weight = randoms(N * K, 4), dout = randoms(N * C, 5);

  auto gathered = nans(S * C);
  std::vector<float> rgathered(gathered.size());
  emu::moe_gather_rows(gathered.data(), x.data(), token.data(), scale.data(), S, C, kStream);
  ref.moe_gather_rows(host(rgathered, {S, C}), host(x, {N, C}), host(token, {S}), host(scale, {S}));
  check_close(gathered, rgathered, kTol, "moe gather");
  // bf16 out from fp32 rows, without a scale: the cpu's rounding, bit for bit
  std::vector<uint16_t> g16(sz(S * C), 0x7fc0);
  emu::moe_gather_rows(g16.data(), x.data(), token.data(), static_cast<const float*>(nullptr), S, C,
                       kStream);
  std::vector<float> runscaled(sz(S * C));
  ref.moe_gather_rows(host(runscaled, {S, C}), host(x, {N, C}), host(token, {S}), Tensor());
  CHECK(g16 == bf16_bits_of(runscaled));

  auto combined = randoms(N * C, 6), rcombined = combined;
  emu::moe_combine_rows(combined.data(), y.data(), slot.data(), weight.data(), N, K, C, kStream);
  ref.moe_combine_rows(host(rcombined, {N, C}), host(y, {S, C}), host(slot, {N, K}),
                       host(weight, {N, K}));
  check_close(combined, rcombined, kTol, "moe combine");

  auto dgate = nans(N * K);
  std::vector<float> rdgate(dgate.size());
  emu::moe_gate_grad(dgate.data(), dout.data(), y.data(), slot.data(), N, K, C, kStream);
  ref.moe_gate_grad(host(rdgate, {N, K}), host(dout, {N, C}), host(y, {S, C}), host(slot, {N, K}));
  check_close(dgate, rdgate, kTol, "moe gate grad");
  for (size_t i = 0; i < slot.size(); ++i)
    if (slot[i] < 0) CHECK(dgate[i] == 0.0f);  // a dropped choice's weight gets no gradient
}

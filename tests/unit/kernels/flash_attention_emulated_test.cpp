// The flash attention kernels (kernels/flash_attention.cu, launchers included), run on the cpu
// through cuda_emulation.h (each CUDA thread a fiber, meeting the others at barriers), against
// the cpu backend: forward output, the row log-sum-exp (against float64), and dqkv, in fp32 and
// with a bf16 output; over lengths below, at and across the 32-row tiles (16 above head size 64)
// and head sizes 16/32/64/80/96/128. This checks the indexing, causal masking, online softmax and
// backward algebra of the exact kernel source on machines without a GPU; tests/unit/cuda runs the
// same checks on a device.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>

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

// Forward then backward through the emulated launchers of kernels/flash_attention.cu.
template <class OutT>
void run_flash(std::vector<OutT>& out, std::vector<float>& lse, std::vector<float>& dqkv,
               const std::vector<float>& qkv, const std::vector<float>& dout, int64_t B, int64_t T,
               int64_t NH, int64_t HS) {
  std::vector<float> dsum(static_cast<size_t>(B * NH * T));
  emu::flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH * HS, NH, nullptr);
  emu::flash_attention_backward(dqkv.data(), dsum.data(), dout.data(), qkv.data(), out.data(),
                                lse.data(), B, T, NH * HS, NH, nullptr);
}

template <int HS>
void check_against_cpu(int64_t B, int64_t T, int64_t NH, bool bf16_out) {
  const int64_t C = NH * HS;
  INFO("B=" << B << " T=" << T << " NH=" << NH << " HS=" << HS << (bf16_out ? " bf16" : " fp32"));
  auto qkv = randoms(B * T * 3 * C, 1, -2, 2), dy = randoms(B * T * C, 2);
  // backward overwrites dqkv: a NaN left anywhere fails the check
  std::vector<float> lse = nans(B * NH * T), dqkv = nans(B * T * 3 * C), out_f = nans(B * T * C);
  std::vector<uint16_t> out_b(out_f.size(), 0x7fc0);
  if (bf16_out)
    run_flash(out_b, lse, dqkv, qkv, dy, B, T, NH, HS);
  else
    run_flash(out_f, lse, dqkv, qkv, dy, B, T, NH, HS);
  if (bf16_out)
    for (size_t i = 0; i < out_b.size(); ++i) out_f[i] = cpu::float_from_bf16_bits(out_b[i]);

  // The cpu reference, with the same (possibly bf16-rounded) out for backward.
  cpu::CpuBackend ref;
  std::vector<float> out(out_f.size()), att(static_cast<size_t>(B * NH * T * T));
  std::vector<float> dref = nans(B * T * 3 * C);
  ref.attention_forward(host(out, {B, T, C}), host(att, {B, NH, T, T}), host(qkv, {B, T, 3 * C}),
                        int(NH));
  if (bf16_out)
    for (float& v : out) v = cpu::round_to_bf16(v);
  ref.attention_backward(host(dref, {B, T, 3 * C}), host(dy, {B, T, C}), host(qkv, {B, T, 3 * C}),
                         host(out, {B, T, C}), host(att, {B, NH, T, T}), int(NH));
  const double out_tol = bf16_out ? 1e-2 : 1e-5, grad_tol = bf16_out ? 1e-2 : 1e-5;
  CHECK(rel_error(out_f, out) < out_tol);
  CHECK(rel_error(lse, lse_float64(qkv, B, T, NH, HS)) < 1e-5);
  INFO("dqkv relative error " << rel_error(dqkv, dref));
  CHECK(rel_error(dqkv, dref) < grad_tol);
}

// The attention kernel families: 0 reference (attention.cu), 1 flash, 2 tensor cores (WMMA),
// 3 tensor cores with register-resident tiles (mma.sync).
constexpr int kFamilies = 4;
const char* family_name(int family) {
  return family == 0 ? "reference" : family == 1 ? "flash" : family == 2 ? "wmma" : "mma";
}

// Backward's scratch for every family: the reference's B*NH*T*T, the mma kernels' copies.
size_t work_floats(int64_t B, int64_t T, int64_t C, int64_t NH) {
  return static_cast<size_t>(
      std::max(B * NH * T * T, emu::mma_attention_backward_scratch_floats(B, T, C, NH)));
}

// Forward of `family` with a bf16 out; state: att [B,NH,T,T] (reference) or lse [B,NH,T].
template <class QkvT>
void family_forward(int family, uint16_t* out, float* state, const QkvT* qkv, int64_t B, int64_t T,
                    int64_t C, int64_t NH) {
  if (family == 0)
    emu::attention_forward(out, state, qkv, B, T, C, NH, nullptr);
  else if (family == 1)
    emu::flash_attention_forward(out, state, qkv, B, T, C, NH, nullptr);
  else if (family == 2)
    emu::tc_attention_forward(out, state, qkv, B, T, C, NH, nullptr);
  else
    emu::mma_attention_forward(out, state, qkv, B, T, C, NH, nullptr);
}

// Its backward into dqkv (fp32 or bf16 bits); work: work_floats() floats of scratch.
template <class QkvT, class DqkvT>
void family_backward(int family, DqkvT* dqkv, float* work, const float* dout, const QkvT* qkv,
                     const uint16_t* out, const float* state, int64_t B, int64_t T, int64_t C,
                     int64_t NH) {
  if (family == 0)
    emu::attention_backward(dqkv, dout, qkv, state, work, B, T, C, NH, nullptr);
  else if (family == 1)
    emu::flash_attention_backward(dqkv, work, dout, qkv, out, state, B, T, C, NH, nullptr);
  else if (family == 2)
    emu::tc_attention_backward(dqkv, work, dout, qkv, out, state, B, T, C, NH, nullptr);
  else
    emu::mma_attention_backward(dqkv, work, dout, qkv, out, state, B, T, C, NH, nullptr);
}

}  // namespace

TEST_CASE("flash_attention_kernels_match_cpu_backend_in_emulation", "[kernels][attention]") {
  for (bool bf16_out : {false, true}) {
    check_against_cpu<16>(2, 37, 3, bf16_out);   // two tiles, the second partial
    check_against_cpu<64>(1, 1, 2, bf16_out);    // a single row
    check_against_cpu<64>(2, 64, 2, bf16_out);   // exactly two tiles
    check_against_cpu<32>(1, 70, 4, bf16_out);   // three tiles
    check_against_cpu<128>(2, 37, 2, bf16_out);  // 16-row tiles: three, the last partial
    check_against_cpu<80>(1, 20, 2, bf16_out);
    check_against_cpu<96>(1, 16, 1, bf16_out);  // exactly one 16-row tile
  }
}

// The tensor-core kernel families (2: flash_attention_tc.cu, WMMA emulated tile by tile; 3:
// flash_attention_mma.cu, mma.sync emulated lane by lane from the PTX fragment table), bf16 out,
// against the cpu backend's bf16 path: bf16 products, so a bf16 tolerance. The lengths fall
// below, at and across the 32/64-row tiles of both. With an fp32 qkv, and with a bf16 one (bf16
// compute's, which the mma kernels fetch with cp.async, two tiles in flight; the reference reads
// the values it holds). Head sizes 80, 96 and 128 in the mma kernels only (32-key forward tiles; dq
// stages q and dout by turns through a K/V buffer; at 80 a 32-row tile's 16-byte pieces are not
// whole passes of the block).
TEST_CASE("tensor_core_attention_kernels_match_cpu_backend_in_emulation", "[kernels][attention]") {
  for (int family : {2, 3})
    for (const bool bf16_qkv : {false, true})
      for (const auto [B, T, NH, HS] : {std::array<int64_t, 4>{1, 70, 2, 64},
                                        {2, 37, 2, 32},
                                        {1, 1, 1, 64},
                                        {1, 128, 1, 64},
                                        {1, 100, 1, 32},
                                        {1, 129, 1, 64},
                                        {1, 100, 2, 128},
                                        {2, 64, 1, 128},
                                        {1, 70, 2, 80},
                                        {1, 45, 1, 96}}) {
        if (family == 2 && HS > 64) continue;  // WMMA's kernels take 32 and 64
        const int64_t C = NH * HS;
        INFO(family_name(family) << ": B=" << B << " T=" << T << " NH=" << NH << " HS=" << HS
                                 << (bf16_qkv ? ", bf16 qkv" : ""));
        auto qkv = randoms(B * T * 3 * C, 7, -1, 1), dy = randoms(B * T * C, 8, -1, 1);
        const std::vector<uint16_t> qkv16 = bf16_bits_of(qkv);
        if (bf16_qkv) qkv = floats_of(qkv16);  // the values the bf16 qkv holds
        std::vector<float> lse = nans(B * NH * T), dqkv = nans(B * T * 3 * C);  // overwritten
        std::vector<float> dsum(work_floats(B, T, C, NH));
        std::vector<uint16_t> out16(static_cast<size_t>(B * T * C), 0x7fc0);
        const auto run = [&](const auto* q) {
          family_forward(family, out16.data(), lse.data(), q, B, T, C, NH);
          family_backward(family, dqkv.data(), dsum.data(), dy.data(), q, out16.data(), lse.data(),
                          B, T, C, NH);
        };
        if (bf16_qkv)
          run(qkv16.data());
        else
          run(qkv.data());
        std::vector<float> out(out16.size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = cpu::float_from_bf16_bits(out16[i]);

        cpu::CpuBackend ref;
        std::vector<float> rout(out.size()), att(static_cast<size_t>(B * NH * T * T));
        std::vector<float> dref = nans(B * T * 3 * C);
        ref.attention_forward(host(rout, {B, T, C}), host(att, {B, NH, T, T}),
                              host(qkv, {B, T, 3 * C}), int(NH));
        ref.attention_backward(host(dref, {B, T, 3 * C}), host(dy, {B, T, C}),
                               host(qkv, {B, T, 3 * C}), host(rout, {B, T, C}),
                               host(att, {B, NH, T, T}), int(NH));
        const double out_err = rel_error(out, rout),
                     lse_err = rel_error(lse, lse_float64(qkv, B, T, NH, HS));
        const double grad_err = rel_error(dqkv, dref);
        INFO("out " << out_err << ", lse " << lse_err << ", dqkv " << grad_err);
        CHECK(out_err < 1e-2);
        CHECK(lse_err < 1e-2);
        CHECK(grad_err < 2e-2);
      }
}

// bf16 qkv (bf16 compute): every attention kernel family reads the bf16 bits as the fp32 values
// they widen to, so its outputs equal, bit for bit, the same kernels' on an fp32 qkv holding
// those values (bf16 out both times; an fp32 dqkv).
TEST_CASE("attention_kernels_read_bf16_qkv_as_their_fp32_values_in_emulation",
          "[kernels][attention][bf16]") {
  const int64_t B = 1, T = 40, NH = 2, HS = 32, C = NH * HS;
  const std::vector<uint16_t> qkv16 = bf16_bits_of(randoms(B * T * 3 * C, 21, -2, 2));
  const std::vector<float> wide = floats_of(qkv16);
  const auto dy = randoms(B * T * C, 22);
  struct Result {
    std::vector<uint16_t> out;
    std::vector<float> state, dqkv;
  };
  auto run = [&](int family, const auto* qkv) {
    Result r;
    r.out.assign(static_cast<size_t>(B * T * C), 0x7fc0);
    r.state = nans(family == 0 ? B * NH * T * T : B * NH * T);
    r.dqkv = nans(B * T * 3 * C);
    std::vector<float> work(work_floats(B, T, C, NH));
    family_forward(family, r.out.data(), r.state.data(), qkv, B, T, C, NH);
    family_backward(family, r.dqkv.data(), work.data(), dy.data(), qkv, r.out.data(),
                    r.state.data(), B, T, C, NH);
    return r;
  };
  for (int family = 0; family < kFamilies; ++family) {
    INFO("family " << family_name(family));
    const Result from_bf16 = run(family, qkv16.data()), from_f32 = run(family, wide.data());
    CHECK(from_bf16.out == from_f32.out);
    CHECK(from_bf16.state == from_f32.state);
    CHECK(from_bf16.dqkv == from_f32.dqkv);
    CHECK(std::isfinite(from_bf16.dqkv[0]));  // and it ran:
    // forward wrote every element of the NaN-poisoned out, backward every element of dqkv
    CHECK(std::count(from_bf16.out.begin(), from_bf16.out.end(), uint16_t{0x7fc0}) == 0);
    CHECK(std::all_of(from_bf16.dqkv.begin(), from_bf16.dqkv.end(),
                      [](float v) { return std::isfinite(v); }));
    CHECK(std::any_of(from_bf16.dqkv.begin(), from_bf16.dqkv.end(),
                      [](float v) { return v != 0.0f; }));
  }
}

// A bf16 dqkv (bf16 compute, from a bf16 qkv): every attention kernel family writes the fp32
// dqkv it computes rounded once to nearest even, the cpu backend's rounding bit for bit, into
// every element of the NaN-poisoned buffer.
TEST_CASE("attention_kernels_write_a_bf16_dqkv_as_their_fp32_one_rounded_once_in_emulation",
          "[kernels][attention][bf16]") {
  const int64_t B = 2, T = 37, NH = 2, HS = 32, C = NH * HS;
  const std::vector<uint16_t> qkv16 = bf16_bits_of(randoms(B * T * 3 * C, 31, -2, 2));
  const auto dy = randoms(B * T * C, 32);
  const auto n = static_cast<size_t>(B * T * 3 * C);
  for (int family = 0; family < kFamilies; ++family) {
    INFO("family " << family_name(family));
    std::vector<uint16_t> out(static_cast<size_t>(B * T * C), 0x7fc0);
    std::vector<float> state(static_cast<size_t>(family == 0 ? B * NH * T * T : B * NH * T));
    std::vector<float> work(work_floats(B, T, C, NH));
    const uint16_t* qkv = qkv16.data();
    family_forward(family, out.data(), state.data(), qkv, B, T, C, NH);
    const auto backward = [&](auto* dqkv) {
      family_backward(family, dqkv, work.data(), dy.data(), qkv, out.data(), state.data(), B, T, C,
                      NH);
    };
    std::vector<float> dq32 = nans(B * T * 3 * C);
    std::vector<uint16_t> dq16(n, 0x7fc0);
    backward(dq32.data());
    backward(dq16.data());
    CHECK(std::all_of(dq32.begin(), dq32.end(), [](float v) { return std::isfinite(v); }));
    CHECK(dq16 == bf16_bits_of(dq32));
  }
}

// The mma kernels read rows in 16-byte accesses when qkv and dout are 16-byte aligned, and element
// by element when not (a view at any offset): the same values either way, so the outputs are
// bit for bit the same. Each input is copied once to a 16-byte boundary and once 4 bytes past it.
TEST_CASE("mma_attention_kernels_give_the_same_bits_for_unaligned_inputs_in_emulation",
          "[kernels][attention]") {
  const int64_t B = 1, T = 45, NH = 2, HS = 64, C = NH * HS;
  const auto qkv = randoms(B * T * 3 * C, 41, -1, 1), dy = randoms(B * T * C, 42, -1, 1);
  const std::vector<uint16_t> qkv16 = bf16_bits_of(qkv);
  struct Result {
    std::vector<uint16_t> out;
    std::vector<float> lse, dqkv;
  };
  // The inputs placed `shift` elements into over-sized buffers (vector storage is 16-byte aligned).
  auto run = [&](const auto& q, size_t shift) {
    using QkvT = typename std::decay_t<decltype(q)>::value_type;
    std::vector<QkvT> q_at(q.size() + 8);
    std::vector<float> dy_at(dy.size() + 8);
    std::copy(q.begin(), q.end(), q_at.begin() + static_cast<std::ptrdiff_t>(shift));
    std::copy(dy.begin(), dy.end(), dy_at.begin() + static_cast<std::ptrdiff_t>(shift));
    Result r{std::vector<uint16_t>(static_cast<size_t>(B * T * C), 0x7fc0), nans(B * NH * T),
             nans(B * T * 3 * C)};
    std::vector<float> dsum(work_floats(B, T, C, NH));
    family_forward(3, r.out.data(), r.lse.data(), q_at.data() + shift, B, T, C, NH);
    family_backward(3, r.dqkv.data(), dsum.data(), dy_at.data() + shift, q_at.data() + shift,
                    r.out.data(), r.lse.data(), B, T, C, NH);
    return r;
  };
  for (const bool bf16_qkv : {false, true}) {
    INFO((bf16_qkv ? "bf16 qkv" : "fp32 qkv"));
    const Result aligned = bf16_qkv ? run(qkv16, 0) : run(qkv, 0);
    const Result shifted = bf16_qkv ? run(qkv16, 2) : run(qkv, 1);  // 4 bytes past a boundary
    CHECK(std::all_of(aligned.dqkv.begin(), aligned.dqkv.end(),
                      [](float v) { return std::isfinite(v); }));
    CHECK(aligned.out == shifted.out);
    CHECK(aligned.lse == shifted.lse);
    CHECK(aligned.dqkv == shifted.dqkv);
  }
}

// The mma forward and dq with 32 rows a warp (two 16-row slabs, w and w + 4, sharing every K/V
// fragment read; dq stages its rows 64 at a time) do each row's arithmetic as with 16: out, lse
// and dqkv are bit for bit the same, with bf16 and fp32 qkv, at lengths that end inside a slab,
// at a slab, inside and at the 128-row block, and inside the second block's second slabs; every
// element written (all NaN-poisoned). Above head size 64, 16 rows a warp whatever is asked.
TEST_CASE("mma_attention_gives_the_same_bits_with_32_rows_a_warp_in_emulation",
          "[kernels][attention]") {
  for (const auto [T, HS] :
       {std::array<int64_t, 2>{1, 64}, {70, 32}, {128, 64}, {150, 64}, {200, 32}, {100, 128}}) {
    const int64_t B = 1, NH = 2, C = NH * HS;
    const auto qkv = randoms(B * T * 3 * C, 51, -2, 2), dy = randoms(B * T * C, 52, -1, 1);
    const std::vector<uint16_t> qkv16 = bf16_bits_of(qkv);
    for (const bool bf16_qkv : {false, true}) {
      INFO("T=" << T << " HS=" << HS << (bf16_qkv ? ", bf16 qkv" : ", fp32 qkv"));
      struct Result {
        std::vector<uint16_t> out;
        std::vector<float> lse, dqkv;
      };
      auto run = [&](int rows_per_warp) {
        Result r{std::vector<uint16_t>(static_cast<size_t>(B * T * C), 0x7fc0), nans(B * NH * T),
                 nans(B * T * 3 * C)};
        std::vector<float> work(work_floats(B, T, C, NH));
        const auto pass = [&](const auto* q) {
          emu::mma_attention_forward(r.out.data(), r.lse.data(), q, B, T, C, NH, nullptr,
                                     rows_per_warp);
          emu::mma_attention_backward(r.dqkv.data(), work.data(), dy.data(), q, r.out.data(),
                                      r.lse.data(), B, T, C, NH, nullptr, rows_per_warp);
        };
        if (bf16_qkv)
          pass(qkv16.data());
        else
          pass(qkv.data());
        return r;
      };
      const Result one = run(16), two = run(32);
      CHECK(std::count(two.out.begin(), two.out.end(), uint16_t{0x7fc0}) == 0);
      CHECK(std::all_of(two.lse.begin(), two.lse.end(), [](float v) { return std::isfinite(v); }));
      CHECK(
          std::all_of(two.dqkv.begin(), two.dqkv.end(), [](float v) { return std::isfinite(v); }));
      CHECK(one.out == two.out);
      CHECK(one.lse == two.lse);
      CHECK(one.dqkv == two.dqkv);
    }
  }
  std::vector<uint16_t> out(64);
  std::vector<float> lse(1), qkv(192), dy(64), dqkv(192), work(work_floats(1, 1, 64, 1));
  CHECK_THROWS_WITH(
      emu::mma_attention_forward(out.data(), lse.data(), qkv.data(), 1, 1, 64, 1, nullptr, 24),
      Catch::Contains("24 rows a warp; compiled are 16 and 32"));
  CHECK_THROWS_WITH(emu::mma_attention_backward(dqkv.data(), work.data(), dy.data(), qkv.data(),
                                                out.data(), lse.data(), 1, 1, 64, 1, nullptr, 8),
                    Catch::Contains("8 rows a warp; compiled are 16 and 32"));
}

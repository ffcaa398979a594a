// The fp8 forward GEMM (precision.compute: fp8, runtime/core/fp8_recipe.h) on the cuda backend
// against the cpu backend's emulation: the device's e4m3 rounding of every bf16 value in range,
// the amaxes, the delayed-scaling state, and the descaled product. Skips on devices before Hopper.
#include <cstdint>
#include <cstring>

#include "runtime/core/fp8_recipe.h"
#include "runtime/cpu/fp8.h"
#include "tests/unit/cuda/cuda_test_util.h"

using namespace trainer;
using namespace trainer::cuda::test;

namespace {

std::unique_ptr<Backend> fp8_cuda_or_skip() {
  auto gpu = cuda_or_skip();
  if (gpu && !gpu->supports_fp8()) {
    WARN("SKIPPED: " << gpu->name() << " has no fp8 GEMM (compute capability < 9.0)");
    return nullptr;
  }
  return gpu;
}

}  // namespace

TEST_CASE("cuda_fp8_rounds_every_bf16_value_like_the_cpu", "[cuda][fp8]") {
  auto gpu = fp8_cuda_or_skip();
  if (!gpu) return;
  // Every finite bf16 value of magnitude <= 448, both signs: the largest is 448 itself, so the
  // current scaling of the first call is exactly 1 and the quantized values come out unscaled.
  std::vector<uint16_t> x;
  for (uint32_t b = 0; b < 0x8000; ++b) {
    const float v = cpu::float_from_bf16_bits(static_cast<uint16_t>(b));
    if (std::isfinite(v) && v <= 448.0f) {
      x.push_back(static_cast<uint16_t>(b));
      x.push_back(static_cast<uint16_t>(b | 0x8000));
    }
  }
  const int64_t C = 64;
  while (x.size() % (16 * C) != 0) x.push_back(0);  // fp8 GEMM sizes: multiples of 16
  const int64_t N = static_cast<int64_t>(x.size()) / C;
  std::vector<uint16_t> eye(static_cast<size_t>(C * C), 0);
  for (int64_t i = 0; i < C; ++i) eye[static_cast<size_t>(i * C + i)] = 0x3f80;  // 1.0
  std::vector<float> state(kFp8StateFloats, 0.0f);
  Tensor out = poisoned(*gpu, {N, C});
  gpu->matmul_forward_fp8(out, upload(*gpu, x, {N, C}, DType::bf16),
                          upload(*gpu, eye, {C, C}, DType::bf16), Tensor(),
                          upload(*gpu, state, {kFp8StateFloats}), poisoned(*gpu, {2}));
  const std::vector<float> y = download(*gpu, out);  // x rounded to e4m3, through 448 * (1/448)
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = cpu::float_from_bf16_bits(x[i]);
    INFO("bf16 " << v << " (bits " << x[i] << "): device gave " << y[i]);
    // Values, not bits: a GEMM sums -0 into +0.
    REQUIRE(cpu::float_from_fp8_e4m3(cpu::fp8_e4m3_from_float(y[i])) ==
            cpu::float_from_fp8_e4m3(cpu::fp8_e4m3_from_float(v)));
  }
}

TEST_CASE("cuda_fp8_matmul_and_scaling_state_match_cpu", "[cuda][fp8]") {
  auto gpu = fp8_cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 256, C = 768, OC = 2304;  // GPT-2 small's qkv layer on 256 tokens
  auto w = bf16_bits_of(randoms(OC * C, 2, -0.05f, 0.05f));
  auto bias = randoms(OC, 3);
  std::vector<float> state(kFp8StateFloats, 0.0f), ref_state = state, ref_amax(2);
  Tensor gstate = upload(*gpu, state, {kFp8StateFloats}), gamax = poisoned(*gpu, {2});
  Tensor gw = upload(*gpu, w, {OC, C}, DType::bf16), gb = upload(*gpu, bias, {OC});
  for (int call = 0; call < 3; ++call) {  // fresh (current scaling), then delayed
    INFO("call " << call);
    auto x = bf16_bits_of(randoms(N * C, 10 + uint32_t(call), -2.0f * float(call + 1), 3.0f));
    std::vector<float> want(static_cast<size_t>(N * OC));
    Tensor out = poisoned(*gpu, {N, OC});
    gpu->matmul_forward_fp8(out, upload(*gpu, x, {N, C}, DType::bf16), gw, gb, gstate, gamax);
    ref.matmul_forward_fp8(host(want, {N, OC}), host_bf16(x, {N, C}), host_bf16(w, {OC, C}),
                           host(bias, {OC}), host(ref_state, {kFp8StateFloats}),
                           host(ref_amax, {2}));
    check_close(download(*gpu, out), want, kBf16Tol, "fp8 matmul out");
    CHECK(download(*gpu, gamax) == ref_amax);
    // a bf16 out (qkv's): the same sums with the bias, rounded once (cuBLASLt's bf16 output, or
    // fp32 sums, the bias kernel and a cast where it refuses the bias epilogue)
    Tensor out16 = poisoned_bf16(*gpu, {N, OC});
    gpu->matmul_forward_fp8(out16, upload(*gpu, x, {N, C}, DType::bf16), gw, gb, gstate,
                            poisoned(*gpu, {2}));
    check_close(download_bf16(*gpu, out16), want, kBf16Tol, "fp8 matmul bf16 out");
    gpu->fp8_push_amaxes(gstate, gamax);
    ref.fp8_push_amaxes(host(ref_state, {kFp8StateFloats}), host(ref_amax, {2}));
    CHECK(download(*gpu, gstate) == ref_state);
  }
  // A call raises the amaxes, never lowers them (the calls between two pushes report their max).
  Tensor raised = upload(*gpu, std::vector<float>{1e3f, 0.0f}, {2});
  gpu->matmul_forward_fp8(poisoned(*gpu, {N, OC}),
                          upload(*gpu, bf16_bits_of(randoms(N * C, 20)), {N, C}, DType::bf16), gw,
                          gb, gstate, raised);
  CHECK(download(*gpu, raised) == std::vector<float>{1e3f, ref_amax[1]});
}

TEST_CASE("cuda_fp8_matmul_refuses_host_operands_before_any_launch", "[cuda][fp8]") {
  auto gpu = fp8_cuda_or_skip();
  if (!gpu) return;
  const int64_t N = 16, C = 16, OC = 16;
  std::vector<uint16_t> x_host = bf16_bits_of(randoms(N * C, 4));
  std::vector<float> out_host(static_cast<size_t>(N * OC));
  Tensor x = upload(*gpu, x_host, {N, C}, DType::bf16);
  Tensor w = upload(*gpu, bf16_bits_of(randoms(OC * C, 5)), {OC, C}, DType::bf16);
  Tensor state = upload(*gpu, std::vector<float>(kFp8StateFloats, 0.0f), {kFp8StateFloats});
  Tensor amax = poisoned(*gpu, {2});
  CHECK_THROWS_WITH(gpu->matmul_forward_fp8(poisoned(*gpu, {N, OC}), host_bf16(x_host, {N, C}), w,
                                            Tensor(), state, amax),
                    Catch::Contains("matmul_forward_fp8: inp is not a cuda tensor"));
  CHECK_THROWS_WITH(gpu->matmul_forward_fp8(host(out_host, {N, OC}), x, w, Tensor(), state, amax),
                    Catch::Contains("matmul_forward_fp8: out is not a cuda tensor"));
  // Neither call quantized anything: the amaxes are still the poison.
  for (float a : download(*gpu, amax)) CHECK(std::isnan(a));
}

TEST_CASE("cuda_fp8_matmul_of_an_experts_row_count_matches_cpu", "[cuda][fp8][moe]") {
  // A mixture of experts' fp8 GEMMs take each expert's token count of rows (any number): the
  // inner dimensions (d_model and the MLP width) are multiples of 16, the rows need not be.
  auto gpu = fp8_cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t C = 768, OC = 3072;  // GPT-2 small's fc
  for (const int64_t N : {1, 7, 37, 130}) {
    INFO(N << " rows");
    auto x = bf16_bits_of(randoms(N * C, 30 + uint32_t(N), -2.0f, 2.0f));
    auto w = bf16_bits_of(randoms(OC * C, 31, -0.05f, 0.05f));
    auto bias = randoms(OC, 32);
    std::vector<float> state(kFp8StateFloats, 0.0f), ref_amax(2, 0.0f), want(size_t(N * OC));
    Tensor out = poisoned(*gpu, {N, OC}), amax = upload(*gpu, std::vector<float>(2, 0.0f), {2});
    gpu->matmul_forward_fp8(out, upload(*gpu, x, {N, C}, DType::bf16),
                            upload(*gpu, w, {OC, C}, DType::bf16), upload(*gpu, bias, {OC}),
                            upload(*gpu, state, {kFp8StateFloats}), amax);
    ref.matmul_forward_fp8(host(want, {N, OC}), host_bf16(x, {N, C}), host_bf16(w, {OC, C}),
                           host(bias, {OC}), host(state, {kFp8StateFloats}), host(ref_amax, {2}));
    check_close(download(*gpu, out), want, kBf16Tol, "fp8 matmul out");
    CHECK(download(*gpu, amax) == ref_amax);
  }
}

// The mixed-precision contract of backend.h on the cuda backend, against the cpu backend's bf16
// path (tests/unit/cpu/bf16_operands_test.cpp): bf16 matmul operands through cuBLASLt with fp32
// accumulation (dout rounded to bf16 in backward, for dbias too), and the bf16 outputs
// of layernorm, gelu and attention (tensor-core kernels included). Relative error < 1e-2
// (kBf16Tol; 2e-2 for dqkv through bf16 products); outputs start as NaN.
#include <array>
#include <cstdlib>
#include <string>

#include "tests/unit/cuda/cuda_test_util.h"
#ifdef TRAINER_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

using namespace trainer;
using namespace trainer::cuda::test;

TEST_CASE("cuda_bf16_matmul_forward_and_backward_match_cpu", "[cuda][bf16]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  // GPT-2-like widths (multiples of 8 keep cuBLASLt on its tensor-core kernels) and odd ones.
  for (const auto [N, C, OC] : {std::array<int64_t, 3>{64, 96, 288}, {24, 40, 72}, {7, 13, 5}}) {
    auto x = bf16_bits_of(randoms(N * C, 1)), w = bf16_bits_of(randoms(OC * C, 2));
    auto bias = randoms(OC, 3), dy = randoms(N * OC, 4);
    auto dx = randoms(N * C, 5), dw = randoms(OC * C, 6), db = randoms(OC, 7);
    std::vector<float> y(static_cast<size_t>(N * OC));
    Tensor gx = upload(*gpu, x, {N, C}, DType::bf16), gw = upload(*gpu, w, {OC, C}, DType::bf16);
    Tensor gb = upload(*gpu, bias, {OC}), gy = poisoned(*gpu, {N, OC});
    Tensor gdy = upload(*gpu, dy, {N, OC}), gdx = poisoned(*gpu, {N, C});  // dinp overwritten
    Tensor gdw = upload(*gpu, dw, {OC, C}), gdb = upload(*gpu, db, {OC});
    gpu->matmul_forward(gy, gx, gw, gb);
    gpu->matmul_backward(gdx, gdw, gdb, gdy, gx, gw);
    ref.matmul_forward(host(y, {N, OC}), host_bf16(x, {N, C}), host_bf16(w, {OC, C}),
                       host(bias, {OC}));
    ref.matmul_backward(host(dx, {N, C}), host(dw, {OC, C}), host(db, {OC}), host(dy, {N, OC}),
                        host_bf16(x, {N, C}), host_bf16(w, {OC, C}));
    const std::string at =
        " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    check_close(download(*gpu, gy), y, kBf16Tol, "bf16 matmul out" + at);
    check_close(download(*gpu, gdx), dx, kBf16Tol, "bf16 matmul dinp" + at);
    check_close(download(*gpu, gdw), dw, kBf16Tol, "bf16 matmul dweight" + at);
    check_close(download(*gpu, gdb), db, kBf16Tol, "bf16 matmul dbias" + at);

    // an fp32 out with the residual added in the GEMM (the blocks' projections)
    auto res = randoms(N * OC, 8);
    std::vector<float> yr(y.size());
    ref.matmul_forward(host(yr, {N, OC}), host_bf16(x, {N, C}), host_bf16(w, {OC, C}),
                       host(bias, {OC}), host(res, {N, OC}));
    Tensor gyr = poisoned(*gpu, {N, OC});
    gpu->matmul_forward(gyr, gx, gw, gb, upload(*gpu, res, {N, OC}));
    check_close(download(*gpu, gyr), yr, kBf16Tol, "bf16 matmul out + residual" + at);
  }
}

// TRAINER_GEMM_AUTOTUNE=1: a shape's first calls run each of cuBLASLt's candidate algorithms in
// turn (3 calls each, up to 8 of them), then the winner. Every one of those calls is a real call:
// each must give the cpu's result, the accumulating dweight and the residual's beta 1 included.
TEST_CASE("cuda_gemm_algorithm_trials_give_the_cpu_result_on_every_call", "[cuda][bf16]") {
  setenv("TRAINER_GEMM_AUTOTUNE", "1", 1);
  auto gpu = cuda_or_skip();
  unsetenv("TRAINER_GEMM_AUTOTUNE");
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 256, C = 192, OC = 576;  // widths that give cuBLASLt several candidates
  auto x = bf16_bits_of(randoms(N * C, 1)), w = bf16_bits_of(randoms(OC * C, 2));
  auto bias = randoms(OC, 3), dy = randoms(N * OC, 4), res = randoms(N * OC, 5);
  std::vector<float> y(static_cast<size_t>(N * OC)), dx(static_cast<size_t>(N * C));
  std::vector<float> dw(static_cast<size_t>(OC * C), 0.0f), db(static_cast<size_t>(OC), 0.0f);
  ref.matmul_forward(host(y, {N, OC}), host_bf16(x, {N, C}), host_bf16(w, {OC, C}),
                     host(bias, {OC}), host(res, {N, OC}));
  ref.matmul_backward(host(dx, {N, C}), host(dw, {OC, C}), host(db, {OC}), host(dy, {N, OC}),
                      host_bf16(x, {N, C}), host_bf16(w, {OC, C}));
  Tensor gx = upload(*gpu, x, {N, C}, DType::bf16), gw = upload(*gpu, w, {OC, C}, DType::bf16);
  Tensor gb = upload(*gpu, bias, {OC}), gdy = upload(*gpu, dy, {N, OC});
  Tensor gres = upload(*gpu, res, {N, OC});
  for (int call = 0; call < 3 * 8 + 4; ++call) {
    INFO("call " << call);
    Tensor gy = poisoned(*gpu, {N, OC}), gdx = poisoned(*gpu, {N, C});
    Tensor gdw = upload(*gpu, std::vector<float>(dw.size(), 0.0f), {OC, C});
    Tensor gdb = upload(*gpu, std::vector<float>(db.size(), 0.0f), {OC});
    gpu->matmul_forward(gy, gx, gw, gb, gres);
    gpu->matmul_backward(gdx, gdw, gdb, gdy, gx, gw);
    check_close(download(*gpu, gy), y, kBf16Tol, "out + residual");
    check_close(download(*gpu, gdx), dx, kBf16Tol, "dinp");
    check_close(download(*gpu, gdw), dw, kBf16Tol, "dweight");
    check_close(download(*gpu, gdb), db, kBf16Tol, "dbias");
  }
}

TEST_CASE("cuda_bf16_outputs_of_layernorm_gelu_attention_match_cpu", "[cuda][bf16]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t B = 2, T = 37, NH = 3, HS = 16, C = NH * HS, N = B * T;
  auto x = randoms(N * C, 1, -2, 3), w = randoms(C, 2), b = randoms(C, 3);
  std::vector<float> mean(static_cast<size_t>(N)), rstd(mean);
  std::vector<uint16_t> ln(static_cast<size_t>(N * C));
  Tensor gx = upload(*gpu, x, {N, C}), gw = upload(*gpu, w, {C}), gb = upload(*gpu, b, {C});
  Tensor gln = poisoned_bf16(*gpu, {N, C}), gm = poisoned(*gpu, {N}), gr = poisoned(*gpu, {N});
  gpu->layernorm_forward(gln, gm, gr, gx, gw, gb);
  ref.layernorm_forward(host_bf16(ln, {N, C}), host(mean, {N}), host(rstd, {N}), host(x, {N, C}),
                        host(w, {C}), host(b, {C}));
  check_close(download_bf16(*gpu, gln), floats_of(ln), kBf16Tol, "bf16 layernorm out");
  check_close(download(*gpu, gr), rstd, kF32Tol, "layernorm rstd (fp32)");

  std::vector<uint16_t> ge(static_cast<size_t>(N * C));
  Tensor gge = poisoned_bf16(*gpu, {N * C});
  gpu->gelu_forward(gge, gx.view({N * C}));
  ref.gelu_forward(host_bf16(ge, {N * C}), host(x, {N * C}));
  check_close(download_bf16(*gpu, gge), floats_of(ge), kBf16Tol, "bf16 gelu out");
}

// Attention with a bf16 out: head sizes 32 and 64 run the tensor-core kernels (both families:
// mma.sync, its forward at 16 and at 32 rows a warp, and WMMA), 80, 96 and 128 mma.sync's (WMMA's
// fall back to the fp32 flash kernels there), 16 the fp32 flash kernels (rounding
// only the output), 24 the reference kernels; backward reads that bf16 out. With an fp32 qkv, and
// with a bf16 one (bf16 compute's; the cpu reads it as its widened values).
TEST_CASE("cuda_bf16_attention_matches_cpu_on_tensor_cores_and_cuda_cores", "[cuda][bf16]") {
  cpu::CpuBackend ref;
  for (const char* kernel : {"tensor_core", "tensor_core_32", "wmma"}) {
    auto gpu = cuda_with_attention(kernel);
    if (!gpu) return;
    for (const bool bf16_qkv : {false, true})
      for (const auto [B, T, NH, HS] : {std::array<int64_t, 4>{2, 37, 3, 16},
                                        {2, 130, 2, 64},
                                        {1, 64, 4, 32},
                                        {2, 33, 2, 24},
                                        {1, 200, 2, 32},
                                        {2, 100, 2, 128},
                                        {1, 70, 2, 80},
                                        {1, 45, 2, 96}}) {
        const int64_t C = NH * HS;
        const std::string at = std::string(" [") + kernel + " T=" + std::to_string(T) +
                               " HS=" + std::to_string(HS) + (bf16_qkv ? ", bf16 qkv]" : "]");
        auto qkv = randoms(B * T * 3 * C, 4), dy = randoms(B * T * C, 5);
        if (bf16_qkv) qkv = floats_of(bf16_bits_of(qkv));  // the values the bf16 qkv holds
        auto dq = randoms(B * T * 3 * C, 6);
        std::vector<float> att(static_cast<size_t>(B * NH * T * T));
        std::vector<uint16_t> out(static_cast<size_t>(B * T * C));
        Tensor gq = bf16_qkv ? upload(*gpu, bf16_bits_of(qkv), {B, T, 3 * C}, DType::bf16)
                             : upload(*gpu, qkv, {B, T, 3 * C});
        Tensor gout = poisoned_bf16(*gpu, {B, T, C});
        Tensor gatt = poisoned(*gpu, gpu->attention_state_shape(B, NH, T, HS));
        Tensor gdy = upload(*gpu, dy, {B, T, C}), gdq = poisoned(*gpu, {B, T, 3 * C});
        gpu->attention_forward(gout, gatt, gq, int(NH));
        gpu->attention_backward(gdq, gdy, gq, gout, gatt, int(NH));
        ref.attention_forward(host_bf16(out, {B, T, C}), host(att, {B, NH, T, T}),
                              host(qkv, {B, T, 3 * C}), int(NH));
        ref.attention_backward(host(dq, {B, T, 3 * C}), host(dy, {B, T, C}),
                               host(qkv, {B, T, 3 * C}), host_bf16(out, {B, T, C}),
                               host(att, {B, NH, T, T}), int(NH));
        check_close(download_bf16(*gpu, gout), floats_of(out), kBf16Tol, "bf16 attention out" + at);
        check_close(download(*gpu, gdq), dq, 2 * kBf16Tol, "attention dqkv (bf16 out)" + at);
        if (bf16_qkv) {  // bf16 compute's bf16 dqkv: the same gradient, rounded once
          Tensor gdq16 = poisoned_bf16(*gpu, {B, T, 3 * C});
          gpu->attention_backward(gdq16, gdy, gq, gout, gatt, int(NH));
          check_close(download_bf16(*gpu, gdq16), dq, 2 * kBf16Tol, "attention dqkv (bf16)" + at);
        }
      }
  }
}

// The logits of bf16 compute: the head's GEMM writes them in bf16 (with and without a bias,
// whose fp32 epilogue on a bf16 output cuBLASLt may lack), the cross-entropy reads them in fp32
// and writes dlogits in place, rounded once.
TEST_CASE("cuda_bf16_logits_and_their_cross_entropy_match_cpu", "[cuda][bf16]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 24, C = 64, V = 300, Vp = 384;
  auto x = bf16_bits_of(randoms(N * C, 1, -2, 2)), w = bf16_bits_of(randoms(Vp * C, 2, -2, 2));
  auto bias = randoms(Vp, 3);
  std::vector<int32_t> tgt(static_cast<size_t>(N));
  for (size_t i = 0; i < tgt.size(); ++i)
    tgt[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 37) % V);
  Tensor gx = upload(*gpu, x, {N, C}, DType::bf16), gw = upload(*gpu, w, {Vp, C}, DType::bf16);
  Tensor gb = upload(*gpu, bias, {Vp}), gt = upload(*gpu, tgt, {N});
  for (const bool with_bias : {false, true}) {
    const std::string at = with_bias ? " (bias)" : " (no bias)";
    std::vector<uint16_t> z(static_cast<size_t>(N * Vp));
    std::vector<float> losses(static_cast<size_t>(N));
    Tensor gz = poisoned_bf16(*gpu, {N, Vp}), gloss = poisoned(*gpu, {N});
    gpu->matmul_forward(gz, gx, gw, with_bias ? gb : Tensor());
    ref.matmul_forward(host_bf16(z, {N, Vp}), host_bf16(x, {N, C}), host_bf16(w, {Vp, C}),
                       with_bias ? host(bias, {Vp}) : Tensor());
    check_close(download_bf16(*gpu, gz), floats_of(z), kBf16Tol, "bf16 logits" + at);
    // the cross-entropy from the same bf16 logits on both sides
    Tensor gz_same = upload(*gpu, z, {N, Vp}, DType::bf16);
    gpu->softmax_cross_entropy(gz_same, gloss, gt, 0.125f, V);
    ref.softmax_cross_entropy(host_bf16(z, {N, Vp}), host(losses, {N}), host(tgt, {N}), 0.125f, V);
    check_close(download(*gpu, gloss), losses, kF32Tol, "losses of bf16 logits" + at);
    check_close(download_bf16(*gpu, gz_same), floats_of(z), kBf16Tol, "bf16 dlogits" + at);
  }
}

// dbias from the dweight GEMM's epilogue (cuBLASLt's BGRADB, written to scratch and added) and
// from the bias kernel: both sum dout as the GEMMs read it and accumulate over micro-batches,
// like the cpu backend, for fp32 and bf16 operands and an fp32 or bf16 dout.
namespace {
void use_bias_grad_epilogue(Backend& gpu, bool on) {
#ifdef TRAINER_HAVE_CUDA
  static_cast<cuda::CudaBackend&>(gpu).set_bias_grad_epilogue(on);
#else
  (void)gpu, (void)on;  // (no cuda backend built: cuda_or_skip skipped the test)
#endif
}
}  // namespace

TEST_CASE("cuda_dbias_from_the_gemm_epilogue_and_from_the_bias_kernel_match_cpu", "[cuda][bf16]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 64, C = 96, OC = 288;
  for (const bool epilogue : {true, false})
    for (const DType operands : {DType::f32, DType::bf16})
      for (const DType dout : {DType::f32, DType::bf16}) {
        if (dout == DType::bf16 && operands != DType::bf16) continue;
        const std::string at = std::string(epilogue ? " [epilogue" : " [kernel") + ", " +
                               dtype_name(operands) + " operands, " + dtype_name(dout) + " dout]";
        use_bias_grad_epilogue(*gpu, epilogue);
        HostOperand x(randoms(N * C, 1), operands), w(randoms(OC * C, 2), operands);
        HostOperand dy(randoms(N * OC, 3), dout);
        auto dw = randoms(OC * C, 4), db = randoms(OC, 5);
        Tensor gx = upload_as(*gpu, x.f32, {N, C}, operands);
        Tensor gw = upload_as(*gpu, w.f32, {OC, C}, operands);
        Tensor gdy = upload_as(*gpu, dy.f32, {N, OC}, dout);
        Tensor gdw = upload(*gpu, dw, {OC, C}), gdb = upload(*gpu, db, {OC});
        for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
          gpu->matmul_backward(Tensor(), gdw, gdb, gdy, gx, gw);
          ref.matmul_backward(Tensor(), host(dw, {OC, C}), host(db, {OC}), dy.t({N, OC}),
                              x.t({N, C}), w.t({OC, C}));
        }
        const double tol = operands == DType::bf16 ? kBf16Tol : kF32Tol;
        check_close(download(*gpu, gdw), dw, tol, "dweight" + at);
        check_close(download(*gpu, gdb), db, tol, "dbias" + at);
      }
#ifdef TRAINER_HAVE_CUDA
  // Correct either way; whether cuBLASLt ran the epilogue decides the speed (the bench's row).
  const auto& stats = static_cast<cuda::CudaBackend&>(*gpu).epilogue_stats();
  WARN("cuBLASLt fused " << stats.fused << " bias-gradient epilogue calls, handed back "
                         << stats.handed_back
                         << (stats.fused == 0 ? ": none ran, so both arms tested the bias kernel"
                                              : ""));
#endif
}

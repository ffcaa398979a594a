// The fused GELU ops (backend.h) on the cuda backend against the cpu backend
// (tests/unit/cpu/fused_gelu_test.cpp), in fp32 and bf16, through cuBLASLt's GELU_AUX_BIAS and
// DGELU epilogues (DGELU in bf16 only: its approximate gelu' is 1e-5 off) and through the
// fallback (the GEMM's fp32 sums, then kernels/), and with a
// width that is no multiple of 8 (no epilogue: cuBLASLt's aux rule). Then the next layer's
// matmul_backward on the bf16 dpre. Relative error < 1e-5 (fp32), < 1e-2 (bf16); outputs start
// as NaN.
#include <array>
#include <string>

#include "tests/unit/cuda/cuda_test_util.h"
#ifdef TRAINER_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

using namespace trainer;
using namespace trainer::cuda::test;

TEST_CASE("cuda_fused_gelu_ops_match_cpu_with_and_without_the_epilogue", "[cuda][bf16]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  for (const bool epilogue : {true, false}) {
#ifdef TRAINER_HAVE_CUDA
    static_cast<cuda::CudaBackend&>(*gpu).set_gelu_epilogue(epilogue);
#endif
    for (const DType dt : {DType::f32, DType::bf16}) {
      for (const auto [N, C, F] :
           {std::array<int64_t, 3>{64, 96, 384}, {24, 40, 72}, {7, 13, 20}}) {
        const double tol = dt == DType::bf16 ? kBf16Tol : kF32Tol;
        const std::string at = std::string(epilogue ? " epilogue" : " kernels") +
                               (dt == DType::bf16 ? " bf16" : " fp32") + " N=" + std::to_string(N) +
                               " C=" + std::to_string(C) + " F=" + std::to_string(F);
        HostOperand x(randoms(N * C, 1, -2, 2), dt), w(randoms(F * C, 2), dt);
        HostOperand wp(randoms(C * F, 3), dt);
        auto b = randoms(F, 4), dy = randoms(N * C, 5);
        auto dw = randoms(C * F, 6), db = randoms(C, 7);

        // forward
        HostOperand pre(std::vector<float>(static_cast<size_t>(N * F)), dt), h(pre);
        ref.matmul_gelu_forward(h.t({N, F}), pre.t({N, F}), x.t({N, C}), w.t({F, C}), host(b, {F}));
        Tensor gx = upload_as(*gpu, x.f32, {N, C}, dt), gw = upload_as(*gpu, w.f32, {F, C}, dt);
        Tensor gb = upload(*gpu, b, {F});
        Tensor gh = poisoned_as(*gpu, {N, F}, dt), gpre = poisoned_as(*gpu, {N, F}, dt);
        gpu->matmul_gelu_forward(gh, gpre, gx, gw, gb);
        check_close(download_as(*gpu, gpre), pre.values(), tol, "pre" + at);
        check_close(download_as(*gpu, gh), h.values(), tol, "out" + at);

        // backward through the next linear and the GELU, from the cpu's activations
        HostOperand dpre(std::vector<float>(static_cast<size_t>(N * F)), dt);
        auto rdw = dw, rdb = db;
        ref.matmul_gelu_backward(dpre.t({N, F}), host(rdw, {C, F}), host(rdb, {C}),
                                 host(dy, {N, C}), h.t({N, F}), wp.t({C, F}), pre.t({N, F}));
        Tensor gdpre = poisoned_as(*gpu, {N, F}, dt), gdw = upload(*gpu, dw, {C, F});
        Tensor gdb = upload(*gpu, db, {C}), gdy = upload(*gpu, dy, {N, C});
        gpu->matmul_gelu_backward(gdpre, gdw, gdb, gdy, upload_as(*gpu, h.values(), {N, F}, dt),
                                  upload_as(*gpu, wp.f32, {C, F}, dt),
                                  upload_as(*gpu, pre.values(), {N, F}, dt));
        check_close(download_as(*gpu, gdpre), dpre.values(), tol, "dpre" + at);
        check_close(download(*gpu, gdw), rdw, tol, "dweight (accumulated)" + at);
        check_close(download(*gpu, gdb), rdb, tol, "dbias (accumulated)" + at);

        // the fc layer's backward takes dpre in its dtype (bf16 read as it is)
        auto dx = randoms(N * C, 8), dwfc = randoms(F * C, 9), dbfc = randoms(F, 10);
        auto rdx = dx, rdwfc = dwfc, rdbfc = dbfc;
        ref.matmul_backward(host(rdx, {N, C}), host(rdwfc, {F, C}), host(rdbfc, {F}),
                            dpre.t({N, F}), x.t({N, C}), w.t({F, C}));
        Tensor gdx = poisoned(*gpu, {N, C}), gdwfc = upload(*gpu, dwfc, {F, C});
        Tensor gdbfc = upload(*gpu, dbfc, {F});
        gpu->matmul_backward(gdx, gdwfc, gdbfc, upload_as(*gpu, dpre.values(), {N, F}, dt), gx, gw);
        check_close(download(*gpu, gdx), rdx, tol, "fc dinp" + at);
        check_close(download(*gpu, gdwfc), rdwfc, tol, "fc dweight" + at);
        check_close(download(*gpu, gdbfc), rdbfc, tol, "fc dbias" + at);
      }
    }
#ifdef TRAINER_HAVE_CUDA
    // Correct either way; whether cuBLASLt ran the epilogues decides the speed (the bench's row).
    const auto& stats = static_cast<cuda::CudaBackend&>(*gpu).epilogue_stats();
    WARN("after the" << (epilogue ? " epilogue" : " kernels") << " runs: cuBLASLt fused "
                     << stats.fused << " epilogue calls, handed back " << stats.handed_back);
#endif
  }
}

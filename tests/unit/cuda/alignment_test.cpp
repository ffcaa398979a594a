// cuBLASLt picks its kernels for the alignment it is told: the linear ops on views at 4, 16 and
// 64 bytes past an allocation's 256-byte start (parameters inside the flat buffer sit at such
// offsets) match the cpu backend, in fp32 and bf16, with bias and GELU epilogues and
// the accumulating backward. A plan chosen for aligned pointers and reused for less aligned ones
// would fault or refuse here. Relative error < 1e-5 (fp32), < 1e-2 (bf16); outputs start as NaN.
#include <string>

#include "tests/unit/cuda/cuda_test_util.h"

using namespace trainer;
using namespace trainer::cuda::test;

namespace {

// `t`'s bytes (fp32 values, or bf16 bits of them) at `offset` bytes into a fresh allocation.
Tensor upload_at(Backend& be, const std::vector<float>& v, Shape s, DType t, size_t offset) {
  const auto pad = static_cast<int64_t>(offset / dtype_size(t));  // zeros (bf16 bits 0 too)
  std::vector<float> padded(static_cast<size_t>(pad), 0.0f);
  padded.insert(padded.end(), v.begin(), v.end());
  const auto n = static_cast<int64_t>(padded.size());
  return upload_as(be, padded, {n}, t).slice(pad, s.numel()).view(s);
}

}  // namespace

TEST_CASE("cuda_linear_ops_on_views_at_4_16_and_64_byte_offsets_match_cpu", "[cuda][bf16]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 64, C = 96, OC = 288;
  for (const size_t offset : {size_t{4}, size_t{16}, size_t{64}}) {
    for (const DType dt : {DType::f32, DType::bf16}) {
      const double tol = dt == DType::bf16 ? kBf16Tol : kF32Tol;
      const std::string at = std::string(dt == DType::bf16 ? " bf16" : " fp32") + " at +" +
                             std::to_string(offset) + " B";
      HostOperand x(randoms(N * C, 1), dt), w(randoms(OC * C, 2), dt);
      auto b = randoms(OC, 3);
      Tensor gx = upload_at(*gpu, x.f32, {N, C}, dt, offset);
      Tensor gw = upload_at(*gpu, w.f32, {OC, C}, dt, offset);
      Tensor gb = upload_at(*gpu, b, {OC}, DType::f32, offset);
      const std::vector<float> nan_out(static_cast<size_t>(N * OC), std::nanf(""));

      // forward with the bias epilogue (a bf16 out under bf16 operands: the logits' case)
      HostOperand y(std::vector<float>(static_cast<size_t>(N * OC)), dt);
      ref.matmul_forward(y.t({N, OC}), x.t({N, C}), w.t({OC, C}), host(b, {OC}));
      Tensor gy = upload_at(*gpu, nan_out, {N, OC}, dt, offset);
      gpu->matmul_forward(gy, gx, gw, gb);
      check_close(download_as(*gpu, gy), y.values(), tol, "matmul_forward out" + at);

      // an fp32 out with the residual added in the GEMM (cuBLASLt's C), both at the offset
      auto r = randoms(N * OC, 8);
      std::vector<float> yr(static_cast<size_t>(N * OC));
      ref.matmul_forward(host(yr, {N, OC}), x.t({N, C}), w.t({OC, C}), host(b, {OC}),
                         host(r, {N, OC}));
      Tensor gyr = upload_at(*gpu, nan_out, {N, OC}, DType::f32, offset);
      gpu->matmul_forward(gyr, gx, gw, gb, upload_at(*gpu, r, {N, OC}, DType::f32, offset));
      check_close(download(*gpu, gyr), yr, tol, "matmul_forward out + residual" + at);

      // the hidden layer with its GELU epilogue (pre and out at the offset too)
      HostOperand h(std::vector<float>(static_cast<size_t>(N * OC)), dt), pre(h);
      ref.matmul_gelu_forward(h.t({N, OC}), pre.t({N, OC}), x.t({N, C}), w.t({OC, C}),
                              host(b, {OC}));
      Tensor gh = upload_at(*gpu, nan_out, {N, OC}, dt, offset);
      Tensor gpre = upload_at(*gpu, nan_out, {N, OC}, dt, offset);
      gpu->matmul_gelu_forward(gh, gpre, gx, gw, gb);
      check_close(download_as(*gpu, gpre), pre.values(), tol, "matmul_gelu_forward pre" + at);
      check_close(download_as(*gpu, gh), h.values(), tol, "matmul_gelu_forward out" + at);

      // backward into views at the offset: dinp overwritten (beta 0, from NaN), dweight and dbias
      // accumulated (beta 1)
      HostOperand dy(randoms(N * OC, 4), dt);
      auto dx = randoms(N * C, 5), dw = randoms(OC * C, 6), db = randoms(OC, 7);
      Tensor gdy = upload_at(*gpu, dy.f32, {N, OC}, dt, offset);
      Tensor gdx =
          upload_at(*gpu, std::vector<float>(dx.size(), std::nanf("")), {N, C}, DType::f32, offset);
      Tensor gdw = upload_at(*gpu, dw, {OC, C}, DType::f32, offset);
      Tensor gdb = upload_at(*gpu, db, {OC}, DType::f32, offset);
      gpu->matmul_backward(gdx, gdw, gdb, gdy, gx, gw);
      ref.matmul_backward(host(dx, {N, C}), host(dw, {OC, C}), host(db, {OC}), dy.t({N, OC}),
                          x.t({N, C}), w.t({OC, C}));
      check_close(download(*gpu, gdx), dx, tol, "matmul_backward dinp" + at);
      check_close(download(*gpu, gdw), dw, tol, "matmul_backward dweight" + at);
      check_close(download(*gpu, gdb), db, tol, "matmul_backward dbias" + at);
    }
  }
}

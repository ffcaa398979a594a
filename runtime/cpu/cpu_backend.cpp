// CpuBackend: memory, GEMM, optimizer and elementwise utilities.
#include "runtime/cpu/cpu_backend.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/core/out_of_memory.h"
#include "runtime/cpu/host_pages.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/tensor_checks.h"

namespace trainer::cpu {

CpuBackend::CpuBackend(bool fault_released)
    : faulting_(fault_released ? std::make_unique<ReleasedSpans>(page_size()) : nullptr) {}

CpuBackend::~CpuBackend() = default;

void* CpuBackend::alloc(size_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p)
    throw OutOfMemory("cpu backend: cannot allocate " + std::to_string(rounded) + " bytes (" +
                      std::to_string(rounded >> 20) + " MiB) of host memory");
  return p;
}

void CpuBackend::free(void* p) {
  if (p && faulting_) {  // the allocator writes into freed blocks: their pages come back first
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const ByteSpan& s : faulting_->acquire(a, a + malloc_usable_size(p))) restore_pages(s);
  }
  std::free(p);
}

void CpuBackend::zero(Tensor t) {
  if (t.empty()) return;
  check_host(t, "zero", "t");
  std::memset(t.data, 0, t.nbytes());
}

void CpuBackend::copy(Tensor dst, const Tensor& src) {
  check_host(dst, "copy", "dst");
  check_host(src, "copy", "src");
  TRAINER_CHECK(dst.numel() == src.numel() && dst.dtype == src.dtype,
                "copy: dst " << dst.shape.str() << " " << dtype_name(dst.dtype) << " vs src "
                             << src.shape.str() << " " << dtype_name(src.dtype));
  if (src.nbytes()) std::memmove(dst.data, src.data, src.nbytes());
}

void CpuBackend::to_host(void* dst, const Tensor& src) {
  check_host(src, "to_host", "src");
  if (src.nbytes()) std::memcpy(dst, src.data, src.nbytes());
}

void CpuBackend::from_host(Tensor dst, const void* src) {
  check_host(dst, "from_host", "dst");
  if (dst.nbytes()) std::memcpy(dst.data, src, dst.nbytes());
}

void CpuBackend::release(Tensor t, float fill) {
  check_host(t, "release", "t");
  if (faulting_) {
    const auto a = reinterpret_cast<uintptr_t>(t.data);
    const ReleasedSpans::Release r = faulting_->release(a, a + t.nbytes());
    for (const ByteSpan& s : r.drop) drop_pages(s);
    const uintptr_t item = dtype_size(t.dtype);
    for (const ByteSpan& s : r.fill) {  // (less than a page each)
      const auto lo = static_cast<int64_t>((s.begin - a) / item);
      const auto hi = static_cast<int64_t>((s.end - a) / item);
      if (t.dtype == DType::bf16) {
        auto* p = static_cast<uint16_t*>(t.data);
        std::fill(p + lo, p + hi, bf16_bits_from_float(fill));
      } else {
        float* p = need_f32(t, "release", "t");
        std::fill(p + lo, p + hi, fill);
      }
    }
    return;
  }
  if (t.dtype == DType::bf16) {
    release_range(static_cast<uint16_t*>(t.data), 0, t.numel(), bf16_bits_from_float(fill));
    return;
  }
  release_range(need_f32(t, "release", "t"), 0, t.numel(), fill);
}

void CpuBackend::acquire(Tensor t) {
  check_host(t, "acquire", "t");
  if (!faulting_) return;
  const auto a = reinterpret_cast<uintptr_t>(t.data);
  for (const ByteSpan& s : faulting_->acquire(a, a + t.nbytes())) restore_pages(s);
}

int64_t CpuBackend::resident_bytes(const Tensor& t) {
  check_host(t, "resident_bytes", "t");
  return resident_page_bytes(t.data, t.nbytes());
}

void CpuBackend::gemm(const Gemm& g) {
  GemmArgs<float> a;
  a.trans_a = g.trans_a, a.trans_b = g.trans_b;
  a.m = g.m, a.n = g.n, a.k = g.k, a.alpha = g.alpha, a.beta = g.beta;
  a.a = g.a, a.b = g.b, a.c = g.c, a.lda = g.lda, a.ldb = g.ldb, a.ldc = g.ldc;
  a.batch = g.batch, a.stride_a = g.stride_a, a.stride_b = g.stride_b, a.stride_c = g.stride_c;
  cpu::gemm(a);
}

void CpuBackend::adamw_step(Tensor params, const Tensor& grads, Tensor m, Tensor v,
                            const AdamWParams& p, Tensor params_bf16) {
  const char* op = "adamw_step";
  const int64_t n = adamw_numel(params, grads, m, v, p, op);
  if (!params_bf16.empty()) check_bf16_copy(params_bf16, n, op);
  cpu::adamw_step(need_f32(params, op, "params"), need_f32(grads, op, "grads"),
                  need_f32(m, op, "m"), need_f32(v, op, "v"), n, p.lr, p.beta1, p.beta2, p.eps,
                  p.weight_decay, p.step, p.grad_scale);
  if (!params_bf16.empty()) round_to_bf16(params_bf16, params);  // a second pass is fine on cpu
}

void CpuBackend::scale(Tensor x, float alpha) {
  float* px = need_f32(x, "scale", "x");
  const int64_t n = x.numel();
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) px[i] *= alpha;
}

void CpuBackend::axpy(Tensor y, const Tensor& x, float alpha) {
  float* py = need_f32(y, "axpy", "y");
  const float* px = need_f32(x, "axpy", "x");
  const int64_t n = y.numel();
  check_numel(x, n, "axpy", "x");
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

double CpuBackend::sum_squares(const Tensor& x) {
  if (x.numel() == 0) return 0;
  return cpu::sum_squares(need_f32(x, "sum_squares", "x"), x.numel());
}

double CpuBackend::sum(const Tensor& x) {
  if (x.numel() == 0) return 0;
  return cpu::sum(need_f32(x, "sum", "x"), x.numel());
}

void CpuBackend::round_to_bf16(Tensor dst, const Tensor& src) {
  const char* op = "round_to_bf16";
  const float* ps = need_f32(src, op, "src");
  const int64_t n = src.numel();
  check_numel(dst, n, op, "dst");
  check_host(dst, op, "dst");
  if (dst.dtype == DType::bf16) {
    auto* pd = static_cast<uint16_t*>(dst.data);
    TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) pd[i] = bf16_bits_from_float(ps[i]);
    return;
  }
  float* pd = need_f32(dst, op, "dst");
  TRAINER_PARALLEL_FOR_IF(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) pd[i] = cpu::round_to_bf16(ps[i]);
}

}  // namespace trainer::cpu

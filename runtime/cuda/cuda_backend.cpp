// CudaBackend: device selection, memory, GEMM, optimizer and reductions.
#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kernels/kernels.h"
#include "runtime/core/env_switch.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_tensor_checks.h"
#include "runtime/cuda/event_timer.h"
#ifdef TRAINER_HAVE_CUDNN
#include "runtime/cuda/cudnn_attention.h"
#else
namespace trainer::cuda {
class CudnnAttention {};  // never created: this build has no cuDNN headers
}  // namespace trainer::cuda
#endif

namespace trainer::cuda {

namespace {
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount returned 0 devices";
  return n;
}

int device_for_local_rank(int local_rank, int visible) {
  if (visible == 1) return 0;  // bound to one GPU per rank (or one GPU only: NCCL refuses sharing)
  TRAINER_CHECK(local_rank >= 0 && local_rank < visible,
                "cuda backend: LOCAL_RANK " << local_rank << " but only " << visible
                                            << " visible device(s) (CUDA_VISIBLE_DEVICES?)");
  return local_rank;
}

CudaBackend::CudaBackend(int local_rank) {
  attention_kernel_ = attention_kernel_from_env();
  unmap_released_ = cuda_unmap_from_env();
  gelu_epilogue_ = env_switch("TRAINER_GELU_EPILOGUE", gelu_epilogue_,
                              "cuBLASLt's GELU epilogues, the default", "kernels/");
  const bool tune_gemms = gemm_autotune_from_env();
  std::string why;
  const int n = device_count(&why);
  if (n == 0) throw CudaError("cuda backend: no CUDA device (" + why + ")");
  device_ = device_for_local_rank(local_rank, n);
  CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  device_name_ = prop.name;
  compute_capability_ = prop.major * 10 + prop.minor;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  lt_workspace_ = arena_.alloc(kLtWorkspaceBytes);
  lt_ = std::make_unique<LtGemm>(stream_, lt_workspace_, kLtWorkspaceBytes, tune_gemms);
  reduce_buf_ = static_cast<double*>(arena_.alloc(sizeof(double) * (1 + kernels::kReducePartials)));
  if (attention_kernel_ == AttentionKernel::cudnn) {
#ifdef TRAINER_HAVE_CUDNN
    cudnn_attention_ = std::make_unique<CudnnAttention>(stream_, [this](size_t bytes) {
      return scratch(cudnn_workspace_, cudnn_workspace_bytes_, bytes);
    });
#else
    TRAINER_CHECK(false,
                  "TRAINER_ATTENTION = 'cudnn': this build has no cuDNN headers (cmake "
                  "found no cudnn_graph.h; pass -DCUDNN_ROOT=...); choose tensor_core");
#endif
  }
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);  // nothing may still use the GEMM plans
  lt_.reset();
  cudnn_attention_.reset();
  releasable_.reset();  // (it syncs on the stream first)
  if (stream_) cudaStreamDestroy(stream_);
}

std::map<std::string, std::string> CudaBackend::kernels() const {
  std::string attention = attention_kernel_name(attention_kernel_);
#ifdef TRAINER_HAVE_CUDNN
  if (cudnn_attention_) {
    const CudnnAttention::Stats& s = cudnn_attention_->stats();
    attention += " (cuDNN " + std::to_string(cudnn_attention_->version()) + ": " +
                 std::to_string(s.forward + s.backward) + " calls; " + std::to_string(s.refused) +
                 " refused, run by tensor_core)";
  }
#endif
  if (cp_mma_calls_ > 0)
    attention += "; context parallelism: the flash kernels on tensor cores (" +
                 std::to_string(cp_mma_calls_) + " calls)";
  if (cp_flash_calls_ > 0)
    attention += "; context parallelism: the flash kernels on CUDA cores (" +
                 std::to_string(cp_flash_calls_) + " calls)";
  if (cp_reference_calls_ > 0)
    attention += "; context parallelism: the reference cp kernels (kernels/context_attention.cu, " +
                 std::to_string(cp_reference_calls_) + " calls)";
  const std::string zero_release =
      releasable_ ? "ZeRO's released ranges unmapped in " +
                        std::to_string(releasable_->page_bytes() >> 20) + " MiB pages"
      : releasable_why_not_.empty()
          ? "no releasable buffers (ZeRO below 2)"
          : "ZeRO's released ranges filled, their memory kept (" + releasable_why_not_ + ")";
  return {{"attention", attention},
          {"zero_release", zero_release},
          {"gemm", lt_->tunes_algorithms() ? "cuBLASLt, each shape's algorithm tuned"
                                           : "cuBLASLt, the heuristic's first algorithm"},
          {"gelu", gelu_epilogue_ ? "cuBLASLt epilogues" : "kernels/"}};
}

void* CudaBackend::alloc(size_t bytes) {
  return arena_.alloc(bytes);
}

bool CudaBackend::have_releasable() {
  if (!releasable_ && releasable_why_not_.empty()) {
    if (!unmap_released_)
      releasable_why_not_ = "TRAINER_CUDA_UNMAP=0";
    else if (ReleasableMemory::supported(device_, &releasable_why_not_))
      releasable_ = std::make_unique<ReleasableMemory>(device_, stream_);
  }
  return releasable_ != nullptr;
}

void* CudaBackend::alloc_releasable(size_t bytes) {
  return have_releasable() ? releasable_->alloc(bytes) : arena_.alloc(bytes);
}

void* CudaBackend::alloc_released(size_t bytes) {
  if (have_releasable()) return releasable_->alloc(bytes, /*mapped=*/false);
  void* p = arena_.alloc(bytes);  // released on memory that stays: a fill of 0
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return p;
}

void CudaBackend::free(void* p) {
  if (releasable_ && releasable_->free(p)) return;
  arena_.free(p);
}

std::optional<int64_t> CudaBackend::peak_device_bytes() const {
  return static_cast<int64_t>(arena_.reserved_bytes() +
                              (releasable_ ? releasable_->peak_held_bytes() : 0));
}

void CudaBackend::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::unique_ptr<DeviceTimer> CudaBackend::make_timer() {
  return std::make_unique<EventTimer>(stream_);
}

void CudaBackend::zero(Tensor t) {
  if (t.empty()) return;
  check_device(t, "zero", "t");
  CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), stream_));
}

void CudaBackend::release(Tensor t, float fill) {
  if (t.empty()) return;
  const auto fill_all = [&](const Tensor& part) {
    with_float_out(part, "release", "t",
                   [&](auto* p) { kernels::fill(p, fill, part.numel(), stream_); });
  };
  if (!releasable_ || !releasable_->owns(t.data)) return fill_all(t);
  check_device(t, "release", "t");
  const auto a = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t item = dtype_size(t.dtype);
  for (const ByteSpan& s : releasable_->release(t.data, t.nbytes()))  // what stays mapped
    fill_all(
        t.slice(static_cast<int64_t>((s.begin - a) / item), static_cast<int64_t>(s.size() / item)));
}

void CudaBackend::acquire(Tensor t) {
  if (t.empty() || !releasable_ || !releasable_->owns(t.data)) return;
  for (const ByteSpan& s : releasable_->acquire(t.data, t.nbytes()))  // mapped again: zeroed
    CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<void*>(s.begin), 0, s.size(), stream_));
}

int64_t CudaBackend::resident_bytes(const Tensor& t) {
  if (t.empty() || !releasable_ || !releasable_->owns(t.data))
    return static_cast<int64_t>(t.nbytes());
  return releasable_->resident_bytes(t.data, t.nbytes());
}

void CudaBackend::copy(Tensor dst, const Tensor& src) {
  check_device(dst, "copy", "dst");
  check_device(src, "copy", "src");
  TRAINER_CHECK(dst.numel() == src.numel() && dst.dtype == src.dtype,
                "copy: dst " << dst.shape.str() << " " << dtype_name(dst.dtype) << " vs src "
                             << src.shape.str() << " " << dtype_name(src.dtype));
  if (src.nbytes())
    CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::to_host(void* dst, const Tensor& src) {
  check_device(src, "to_host", "src");
  if (!src.nbytes()) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::from_host(Tensor dst, const void* src) {
  check_device(dst, "from_host", "dst");
  if (!dst.nbytes()) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse `src` right away
}

void* CudaBackend::scratch(void*& buf, size_t& have, size_t need) {
  if (need > have) {
    arena_.free(buf);
    buf = arena_.alloc(need);
    have = need;
  }
  return buf;
}

float* CudaBackend::column_scratch(int64_t N, int64_t C) {
  const size_t bytes = static_cast<size_t>(kernels::column_sums_scratch_floats(N, C)) * 4;
  return static_cast<float*>(scratch(col_scratch_, col_scratch_bytes_, bytes));
}

void CudaBackend::run_gemm(LtGemmArgs a) {
  if (a.k == 0) {  // C = beta C: cuBLASLt needs k > 0
    TRAINER_CHECK(
        a.batch == 1 && (a.ldc == 0 || a.ldc == a.n) && !a.bf16_inputs && !a.bias && !a.bf16_output,
        "gemm: k == 0 supported for a packed single fp32 matrix only");
    const size_t bytes = static_cast<size_t>(a.m * a.n) * sizeof(float);
    if (a.c_in && a.c_in != a.c && a.beta != 0)  // C = beta c_in
      CUDA_CHECK(cudaMemcpyAsync(a.c, a.c_in, bytes, cudaMemcpyDeviceToDevice, stream_));
    if (a.beta == 0)  // C is not read (BLAS's rule): NaNs in it must not survive
      CUDA_CHECK(cudaMemsetAsync(a.c, 0, bytes, stream_));
    else
      kernels::scale(static_cast<float*>(a.c), a.beta, a.m * a.n, stream_);
    return;
  }
  if (run_fused(a)) return;
  // no bias epilogue for this shape: plain GEMM, then the bias kernel (and, for a bf16 output,
  // into fp32 sums that are rounded once after the bias)
  TRAINER_CHECK(a.batch == 1 && (a.ldc == 0 || a.ldc == a.n),
                "gemm: a bias needs a packed single matrix");
  const auto* bias = static_cast<const float*>(a.bias);
  a.bias = nullptr;
  void* out = a.c;
  if (a.bf16_output) {
    a.c = scratch(sum_scratch_, sum_scratch_bytes_, static_cast<size_t>(a.m * a.n) * 4);
    a.bf16_output = false;
  }
  lt_->run(a);
  kernels::add_bias(static_cast<float*>(a.c), bias, a.m, a.n, stream_);
  if (a.c != out)
    kernels::cast_f32_to_bf16(static_cast<uint16_t*>(out), static_cast<const float*>(a.c),
                              a.m * a.n, stream_);
}

bool CudaBackend::run_fused(LtGemmArgs a) {
  const bool epilogue = a.bias || a.bias_grad || a.epilogue != LtGemmArgs::Epilogue::none;
  bool ran = lt_->run(a);
  if (!ran && a.bias && a.bf16_output && !LtGemm::refuses_epilogue(a)) {
    // cuBLASLt had no algorithm for the fp32 bias; its default bias type is the output's: the
    // bias rounded to bf16 in scratch
    auto* bias16 = static_cast<uint16_t*>(
        scratch(bias_scratch_, bias_scratch_bytes_, static_cast<size_t>(a.n) * sizeof(uint16_t)));
    kernels::cast_f32_to_bf16(bias16, static_cast<const float*>(a.bias), a.n, stream_);
    a.bias = bias16, a.bias_bf16 = true;
    ran = lt_->run(a);
  }
  if (epilogue) ++(ran ? epilogue_stats_.fused : epilogue_stats_.handed_back);
  return ran;
}

namespace {
LtGemmArgs lt_args(const Backend::Gemm& g) {
  LtGemmArgs a;
  a.trans_a = g.trans_a, a.trans_b = g.trans_b, a.m = g.m, a.n = g.n, a.k = g.k;
  a.alpha = g.alpha, a.beta = g.beta, a.a = g.a, a.b = g.b, a.c = g.c;
  a.lda = g.lda, a.ldb = g.ldb, a.ldc = g.ldc;
  a.batch = g.batch, a.stride_a = g.stride_a, a.stride_b = g.stride_b, a.stride_c = g.stride_c;
  return a;
}
}  // namespace

void CudaBackend::gemm(const Gemm& g) {
  run_gemm(lt_args(g));
}

void CudaBackend::adamw_step(Tensor params, const Tensor& grads, Tensor m, Tensor v,
                             const AdamWParams& p, Tensor params_bf16) {
  const char* op = "adamw_step";
  const int64_t n = adamw_numel(params, grads, m, v, p, op);
  uint16_t* copy = nullptr;
  if (!params_bf16.empty()) {
    check_bf16_copy(params_bf16, n, op);
    check_device(params_bf16, op, "params_bf16");
    copy = static_cast<uint16_t*>(params_bf16.data);
  }
  const float bc1 = float(1 - std::pow(double(p.beta1), double(p.step)));
  const float bc2 = float(1 - std::pow(double(p.beta2), double(p.step)));
  kernels::adamw_step(need_f32(params, op, "params"), need_f32(grads, op, "grads"),
                      need_f32(m, op, "m"), need_f32(v, op, "v"), n, p.lr, p.beta1, p.beta2, p.eps,
                      p.weight_decay, bc1, bc2, p.grad_scale, copy, stream_);
}

void CudaBackend::scale(Tensor x, float alpha) {
  kernels::scale(need_f32(x, "scale", "x"), alpha, x.numel(), stream_);
}

void CudaBackend::axpy(Tensor y, const Tensor& x, float alpha) {
  check_numel(x, y.numel(), "axpy", "x");
  kernels::axpy(need_f32(y, "axpy", "y"), need_f32(x, "axpy", "x"), alpha, y.numel(), stream_);
}

double CudaBackend::reduce(const Tensor& x, bool squares, const char* op) {
  if (x.numel() == 0) return 0;
  kernels::sum_fp64(reduce_buf_, reduce_buf_ + 1, need_f32(x, op, "x"), x.numel(), squares,
                    stream_);
  double result = 0;
  CUDA_CHECK(
      cudaMemcpyAsync(&result, reduce_buf_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return result;
}

double CudaBackend::sum_squares(const Tensor& x) {
  return reduce(x, true, "sum_squares");
}

double CudaBackend::sum(const Tensor& x) {
  return reduce(x, false, "sum");
}

void CudaBackend::round_to_bf16(Tensor dst, const Tensor& src) {
  const char* op = "round_to_bf16";
  const float* ps = need_f32(src, op, "src");
  check_numel(dst, src.numel(), op, "dst");
  check_device(dst, op, "dst");
  if (dst.dtype == DType::bf16)
    kernels::cast_f32_to_bf16(static_cast<uint16_t*>(dst.data), ps, src.numel(), stream_);
  else
    kernels::round_to_bf16_f32(need_f32(dst, op, "dst"), ps, src.numel(), stream_);
}

}  // namespace trainer::cuda

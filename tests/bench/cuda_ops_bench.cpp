// Times the cuda backend's ops at GPT-2-small shapes (B*T = 8192 rows, C 768, 12 heads of 64,
// T 1024, V 50257), each beside a reference run in the same invocation:
//   - bf16 GEMMs (the four linear layers and the head, forward and backward) vs fp32 GEMMs, and
//     the head with the vocabulary padded to 50304 (model.make_vocab_size_divisible_by: 128) vs
//     the bare 50257; each bf16 GEMM with its algorithms tuned (TRAINER_GEMM_AUTOTUNE=1) vs the
//     heuristic's first;
//   - attention forward+backward: tensor-core and fp32 flash kernels vs the reference kernels
//     (the T x T matrix materialised), with the largest relative difference of out and dqkv to
//     the reference's; the tensor-core kernels on a bf16 qkv vs an fp32 one; on a bf16 qkv (the
//     model's), the mma.sync forward and backward each alone, 32 rows a warp (forward and dq)
//     vs 16, with whether the outputs are the same bits; with a bf16 dqkv too (bf16 compute's),
//     cuDNN's fused attention (TRAINER_ATTENTION=cudnn) forward and backward vs the mma.sync
//     kernels', with the largest relative difference of its out, lse and dqkv to theirs; and
//     at head size 128 (6 heads of 128, the same FLOPs) mma.sync's forward and backward vs 12
//     heads of 64, and cuDNN's vs them;
//   - context parallelism's attention (cp rank 0 of 2, T 4096, bf16): the mma.sync and the CUDA
//     core flash kernels vs the reference kernels (probabilities kept), with the largest relative
//     difference of out and dqkv_all to theirs; the whole sequence's mma.sync attention beside it;
//   - the MLP's GELU in bf16 (fc forward and fc proj's input backward, with the GELU between):
//     fused into cuBLASLt's epilogues, and fused as GEMM + kernels/ (TRAINER_GELU_EPILOGUE=0),
//     vs the unfused ops (fp32 GEMM output, gelu_forward, gelu_backward), with the largest
//     relative difference of each path's dpre to the unfused one's;
//   - a linear layer's bf16 parameter gradients (dweight and dbias from an fp32 dout): dbias from
//     the dweight GEMM's epilogue (cuBLASLt's BGRADB) vs the bias kernel after the GEMM, with the
//     largest relative difference of dbias and whether cuBLASLt ran the epilogue;
//   - layernorm (forward and backward together, and each alone), cross-entropy and AdamW in GB/s
//     of the bytes they must move, vs a device copy;
//     the head and the cross-entropy with bf16 logits vs fp32 logits.
// Prints one table; scripts/gpu-check.sh runs it. Usage: cuda_ops_bench [--rows 8192] [--reps 10]
// [--only gemms|memory|mlp|grads|attention|cp] (one group, e.g. for a profiler)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/cpu/ops_optim.h"
#include "runtime/cuda/cuda_backend.h"
#ifdef TRAINER_HAVE_CUDNN
#include "runtime/cuda/cudnn_attention.h"
#endif

using namespace trainer;
using Clock = std::chrono::steady_clock;

namespace {

int g_reps = 10;

// Seconds per call of fn (after one warm-up call), the device synced around the timed calls.
double time_op(Backend& be, const std::function<void()>& fn) {
  fn();
  be.synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < g_reps; ++i) fn();
  be.synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count() / g_reps;
}

struct Buffers {
  Backend& be;
  std::vector<void*> owned;
  ~Buffers() {
    for (void* p : owned) be.free(p);
  }
  Tensor make(Shape s, DType t, uint32_t seed, float lo = -1, float hi = 1) {
    const int64_t n = s.numel();
    Tensor d(be.alloc(static_cast<size_t>(n) * dtype_size(t)), s, t, DeviceType::cuda);
    owned.push_back(d.data);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> h(static_cast<size_t>(n));
    for (float& x : h) x = dist(gen);
    if (t == DType::f32) {
      be.from_host(d, h.data());
    } else {  // bf16: upload fp32, round on the device
      Tensor tmp(be.alloc(static_cast<size_t>(n) * 4), s, DType::f32, DeviceType::cuda);
      be.from_host(tmp, h.data());
      be.round_to_bf16(d, tmp);
      be.synchronize();
      be.free(tmp.data);
    }
    return d;
  }
};

std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> h(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::f32) {
    be.to_host(h.data(), t);
  } else {
    std::vector<uint16_t> bits(h.size());
    be.to_host(bits.data(), t);
    for (size_t i = 0; i < h.size(); ++i) h[i] = cpu::float_from_bf16_bits(bits[i]);
  }
  return h;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double worst = 0, scale = 1e-30;
  for (float r : ref) scale = std::max(scale, std::fabs(double(r)));
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::isfinite(a[i]) ? std::fabs(double(a[i]) - ref[i]) / scale : 1e30);
  return worst;
}

void row(const std::string& op, const std::string& shape, double seconds, const std::string& rate,
         const std::string& versus) {
  std::printf("%-34s %-22s %9.3f ms  %-16s %s\n", op.c_str(), shape.c_str(), seconds * 1e3,
              rate.c_str(), versus.c_str());
}

std::string tflops(double flop, double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f TFLOP/s", flop / s / 1e12);
  return b;
}
std::string gbps(double bytes, double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f GB/s", bytes / s / 1e9);
  return b;
}
std::string share_of(double bytes, double s, double copy_bytes, double copy_s) {
  char b[64];
  std::snprintf(b, sizeof b, "%.0f%% of the copy's GB/s",
                100.0 * (bytes / s) / (copy_bytes / copy_s));
  return b;
}
std::string ratio(const char* what, double ref_s, double s) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2fx faster than %s", ref_s / s, what);
  return b;
}

void bench_gemms(Backend& be, int64_t N) {
  struct Linear {
    const char* name;
    int64_t C, OC;
  };
  const Linear layers[] = {{"qkv", 768, 2304},
                           {"attn proj", 768, 768},
                           {"fc", 768, 3072},
                           {"fc proj", 3072, 768},
                           {"lm head", 768, 50257}};
  // out_t: the output's and dout's dtype (bf16: the logits of bf16 compute). warm_up: calls
  // before the timing (a tuning backend's trials settle in them).
  auto time_linear = [&](const Linear& l, DType t, DType out_t = DType::f32, Backend* on = nullptr,
                         int warm_up = 0) {
    Backend& b = on ? *on : be;
    Buffers buf{b, {}};
    Tensor x = buf.make({N, l.C}, t, 1), w = buf.make({l.OC, l.C}, t, 2);
    Tensor y = buf.make({N, l.OC}, out_t, 3), dy = buf.make({N, l.OC}, out_t, 4);
    Tensor dx = buf.make({N, l.C}, DType::f32, 5), dw = buf.make({l.OC, l.C}, DType::f32, 6);
    const auto fwd_bwd = [&] {
      b.matmul_forward(y, x, w, Tensor());
      b.matmul_backward(dx, dw, Tensor(), dy, x, w);
    };
    for (int i = 0; i < warm_up; ++i) fwd_bwd();
    b.synchronize();
    return time_op(b, fwd_bwd);
  };
  auto flop = [&](const Linear& l) {  // fwd + 2 bwd GEMMs
    return 3 * 2.0 * double(N) * double(l.C) * double(l.OC);
  };
  auto shape = [&](const Linear& l) {
    return std::to_string(N) + "x" + std::to_string(l.C) + "x" + std::to_string(l.OC);
  };
  double head_s = 0;
  std::vector<double> heuristic_s;
  for (const Linear& l : layers) {
    const double fp32_s = time_linear(l, DType::f32), bf16_s = time_linear(l, DType::bf16);
    row(std::string("matmul fwd+bwd bf16 ") + l.name, shape(l), bf16_s, tflops(flop(l), bf16_s),
        ratio("fp32", fp32_s, bf16_s));
    head_s = bf16_s;  // the last row: the head at V 50257
    heuristic_s.push_back(bf16_s);
  }
  const Linear padded{"lm head, vocab padded", 768, 50304};
  const double padded_s = time_linear(padded, DType::bf16);
  row(std::string("matmul fwd+bwd bf16 ") + padded.name, shape(padded), padded_s,
      tflops(flop(padded), padded_s), ratio("V 50257", head_s, padded_s));
  const double bf16_logits_s = time_linear(padded, DType::bf16, DType::bf16);
  row("matmul fwd+bwd bf16 lm head, bf16 logits", shape(padded), bf16_logits_s,
      tflops(flop(padded), bf16_logits_s), ratio("fp32 logits", padded_s, bf16_logits_s));

  // TRAINER_GEMM_AUTOTUNE=1: each shape tries cuBLASLt's candidates (3 timed calls each, up to
  // 8 of them) in the warm-up calls, then keeps the fastest.
  setenv("TRAINER_GEMM_AUTOTUNE", "1", 1);
  auto tuned = make_backend("cuda", 0);
  unsetenv("TRAINER_GEMM_AUTOTUNE");
  constexpr int kTrialCalls = 3 * 8 + 2;
  for (size_t i = 0; i + 1 < std::size(layers); ++i) {
    const Linear& l = layers[i];
    const double s = time_linear(l, DType::bf16, DType::f32, tuned.get(), kTrialCalls);
    row(std::string("matmul fwd+bwd bf16 ") + l.name + ", tuned", shape(l), s, tflops(flop(l), s),
        ratio("the heuristic's pick", heuristic_s[i], s));
  }
  const double tuned_head_s =
      time_linear(padded, DType::bf16, DType::bf16, tuned.get(), kTrialCalls);
  row("matmul fwd+bwd bf16 lm head, bf16 logits, tuned", shape(padded), tuned_head_s,
      tflops(flop(padded), tuned_head_s),
      ratio("the heuristic's pick", bf16_logits_s, tuned_head_s));
}

// One attention layer's buffers (NH heads of HS: 12 of 64 unless said; qkv in [-2, 2]) on a
// backend made with TRAINER_ATTENTION = kernel.
struct AttentionHeads {
  int64_t NH = 12, HS = 64;
};
struct AttentionLayer {
  int64_t NH, HS, C;
  std::unique_ptr<Backend> be;
  Buffers buf;  // (after be: freed before it)
  Tensor qkv, dy, out, att, dqkv;
  AttentionLayer(const char* kernel, int64_t B, int64_t T, bool bf16_qkv, bool bf16_out,
                 bool bf16_dqkv = false, AttentionHeads heads = {})
      : NH(heads.NH), HS(heads.HS), C(heads.NH * heads.HS), be(backend_with(kernel)), buf{*be, {}} {
    qkv = buf.make({B, T, 3 * C}, bf16_qkv ? DType::bf16 : DType::f32, 11, -2, 2);
    dy = buf.make({B, T, C}, DType::f32, 12);
    out = buf.make({B, T, C}, bf16_out ? DType::bf16 : DType::f32, 13);
    att = buf.make(be->attention_state_shape(B, NH, T, HS), DType::f32, 14);
    dqkv = buf.make({B, T, 3 * C}, bf16_dqkv ? DType::bf16 : DType::f32, 15);
  }
  static std::unique_ptr<Backend> backend_with(const char* kernel) {
    setenv("TRAINER_ATTENTION", kernel, 1);
    return make_backend("cuda", 0);
  }
  void forward() { be->attention_forward(out, att, qkv, int(NH)); }
  void backward() {
    be->zero(dqkv);
    be->attention_backward(dqkv, dy, qkv, out, att, int(NH));
  }
};

// Forward + backward of one attention layer with TRAINER_ATTENTION = kernel.
struct AttentionRun {
  double seconds = 0;
  std::vector<float> out, dqkv;
};

AttentionRun run_attention(const char* kernel, bool bf16_out, int64_t B, int64_t T,
                           bool bf16_qkv = false) {
  AttentionLayer l(kernel, B, T, bf16_qkv, bf16_out);
  AttentionRun r;
  r.seconds = time_op(*l.be, [&] {
    l.forward();
    l.backward();
  });
  r.out = download(*l.be, l.out);
  r.dqkv = download(*l.be, l.dqkv);
  return r;
}

// Attention on a bf16 qkv, the forward and the backward each timed alone, with
// TRAINER_ATTENTION = kernel: tensor_core (16 rows a warp), tensor_core_32 (32 in the forward and
// dq), cudnn.
struct AttentionParts {
  double forward_s = 0, backward_s = 0;
  std::vector<float> out, lse, dqkv;
  std::string cudnn_calls;  // for cudnn: how many calls cuDNN ran and refused
};

AttentionParts run_parts(const char* kernel, int64_t B, int64_t T, bool bf16_dqkv = false,
                         AttentionHeads heads = {}) {
  AttentionLayer l(kernel, B, T, true, true, bf16_dqkv, heads);
  AttentionParts r;
  r.forward_s = time_op(*l.be, [&] { l.forward(); });
  r.backward_s = time_op(*l.be, [&] { l.backward(); });
  r.out = download(*l.be, l.out);
  r.lse = download(*l.be, l.att);
  r.dqkv = download(*l.be, l.dqkv);
#ifdef TRAINER_HAVE_CUDNN
  if (const auto* cudnn = static_cast<cuda::CudaBackend&>(*l.be).cudnn_attention()) {
    const cuda::CudnnAttention::Stats& n = cudnn->stats();
    r.cudnn_calls = "; cuDNN " + std::to_string(cudnn->version()) + " ran " +
                    std::to_string(n.forward + n.backward) + " calls, refused " +
                    std::to_string(n.refused);
  }
#endif
  return r;
}

// cuDNN's fused attention beside the mma.sync kernels' run `tc` of the same heads, qkv, out and
// dqkv all bf16.
void bench_cudnn_attention(const AttentionParts& tc, int64_t B, int64_t T, const std::string& shape,
                           double fwd_flop, double bwd_flop, AttentionHeads heads = {}) {
  AttentionParts cudnn;
  try {
    cudnn = run_parts("cudnn", B, T, true, heads);
  } catch (const std::exception& e) {
    std::printf("attention cuDNN: not run: %s\n", e.what());
    unsetenv("TRAINER_ATTENTION");
    return;
  }
  unsetenv("TRAINER_ATTENTION");
  char diff[96];
  std::snprintf(diff, sizeof diff, "; max rel diff out %.1e lse %.1e",
                max_rel_diff(cudnn.out, tc.out), max_rel_diff(cudnn.lse, tc.lse));
  row("attention fwd cuDNN, bf16", shape, cudnn.forward_s, tflops(fwd_flop, cudnn.forward_s),
      ratio("mma.sync", tc.forward_s, cudnn.forward_s) + diff + cudnn.cudnn_calls);
  std::snprintf(diff, sizeof diff, "; max rel diff dqkv %.1e", max_rel_diff(cudnn.dqkv, tc.dqkv));
  row("attention bwd cuDNN, bf16 dqkv", shape, cudnn.backward_s, tflops(bwd_flop, cudnn.backward_s),
      ratio("mma.sync", tc.backward_s, cudnn.backward_s) + diff);
}

// "; max rel diff out X <grad> Y": a run's out and gradient against a reference run's.
std::string out_and_grad_diff(const std::vector<float>& out, const std::vector<float>& ref_out,
                              const char* grad, const std::vector<float>& g,
                              const std::vector<float>& ref_g) {
  char b[96];
  std::snprintf(b, sizeof b, "; max rel diff out %.1e %s %.1e", max_rel_diff(out, ref_out), grad,
                max_rel_diff(g, ref_g));
  return b;
}

// Context parallelism's attention on cp rank 0 of 2 (its two chunks of every sequence over the
// whole sequence's keys, Backend::attention_forward_cp): forward + backward on a bf16 qkv and out
// with TRAINER_ATTENTION = kernel (tensor_core: the mma.sync kernels, flash: CUDA cores,
// reference: the probabilities kept).
struct ContextRun {
  double seconds = 0;
  std::vector<float> out, dall;
};
ContextRun run_context_attention(const char* kernel, int64_t B, int64_t Tl) {
  constexpr int64_t cp = 2, NH = 12, HS = 64, C = NH * HS;
  setenv("TRAINER_ATTENTION", kernel, 1);
  auto be = make_backend("cuda", 0);
  unsetenv("TRAINER_ATTENTION");
  ContextRun r;
  {
    Buffers buf{*be, {}};
    Tensor all = buf.make({cp, B, Tl, 3 * C}, DType::bf16, 41, -2, 2);
    Tensor dy = buf.make({B, Tl, C}, DType::f32, 42), out = buf.make({B, Tl, C}, DType::bf16, 43);
    Tensor att = buf.make(be->attention_cp_state_shape(B, NH, Tl, cp * Tl, HS), DType::f32, 44);
    Tensor dall = buf.make({cp, B, Tl, 3 * C}, DType::f32, 45);
    const ContextSplit split{0, int(cp)};
    r.seconds = time_op(*be, [&] {
      be->attention_forward_cp(out, att, all, split, int(NH));
      be->attention_backward_cp(dall, dy, all, out, att, split, int(NH));
    });
    r.out = download(*be, out);
    r.dall = download(*be, dall);
  }
  return r;
}

void bench_context_attention(int64_t N) {
  const int64_t T = 4096, Tl = T / 2, B = std::max<int64_t>(1, N / T);
  // a cp rank's share of the causal pairs is half the sequence's (Megatron's balance): its
  // forward 2 (T(T+1)/2) HS per head, the backward twice that
  const double flop = 3.0 * 2.0 * double(B) * 12 * double(T) * double(T + 1) / 2 * 64;
  const std::string shape = "B" + std::to_string(B) + " T4096/2 12x64";
  const ContextRun mma = run_context_attention("tensor_core", B, Tl);
  const ContextRun flash = run_context_attention("flash", B, Tl);
  const ContextRun ref = run_context_attention("reference", B, Tl);
  const AttentionRun whole = run_attention("tensor_core", true, B, T, true);
  unsetenv("TRAINER_ATTENTION");
  row("cp attention fwd+bwd reference", shape, ref.seconds, tflops(flop, ref.seconds),
      "the probabilities [B,NH,Tl,T] kept");
  row("cp attention fwd+bwd flash (CUDA cores)", shape, flash.seconds, tflops(flop, flash.seconds),
      ratio("reference", ref.seconds, flash.seconds) +
          out_and_grad_diff(flash.out, ref.out, "dqkv_all", flash.dall, ref.dall));
  row("cp attention fwd+bwd mma.sync", shape, mma.seconds, tflops(flop, mma.seconds),
      ratio("reference", ref.seconds, mma.seconds) +
          out_and_grad_diff(mma.out, ref.out, "dqkv_all", mma.dall, ref.dall));
  // the whole sequence on one GPU: twice a cp rank's pairs
  row("attention fwd+bwd mma.sync, whole seq", "B" + std::to_string(B) + " T4096 12x64",
      whole.seconds, tflops(2 * flop, whole.seconds),
      ratio("the cp rank's", mma.seconds, whole.seconds) + " (ideal 0.50x: twice the pairs)");
}

void bench_attention(int64_t N) {
  const int64_t T = 1024, B = std::max<int64_t>(1, N / T), NH = 12, HS = 64;
  // The profile's count (README): causal forward 2 T(T+1) HS per head (half of QK^T and PV), the
  // backward twice that whatever the kernel recomputes.
  const double flop = 3.0 * 2.0 * double(B) * NH * double(T) * double(T + 1) * HS;
  const std::string shape = "B" + std::to_string(B) + " T1024 12x64";
  const AttentionRun ref32 = run_attention("reference", false, B, T);
  const AttentionRun flash = run_attention("flash", false, B, T);
  const AttentionRun ref16 = run_attention("reference", true, B, T);
  const AttentionRun tc = run_attention("tensor_core", true, B, T);
  const AttentionRun tc16 = run_attention("tensor_core", true, B, T, true);
  const AttentionRun wmma = run_attention("wmma", true, B, T);
  unsetenv("TRAINER_ATTENTION");
  row("attention fwd+bwd reference fp32", shape, ref32.seconds, tflops(flop, ref32.seconds), "");
  row("attention fwd+bwd flash fp32", shape, flash.seconds, tflops(flop, flash.seconds),
      ratio("reference", ref32.seconds, flash.seconds) +
          out_and_grad_diff(flash.out, ref32.out, "dqkv", flash.dqkv, ref32.dqkv));
  row("attention fwd+bwd tensor cores bf16, mma.sync", shape, tc.seconds, tflops(flop, tc.seconds),
      ratio("reference", ref16.seconds, tc.seconds) +
          out_and_grad_diff(tc.out, ref16.out, "dqkv", tc.dqkv, ref16.dqkv));
  row("attention tensor cores mma.sync, bf16 qkv", shape, tc16.seconds, tflops(flop, tc16.seconds),
      ratio("fp32 qkv", tc.seconds, tc16.seconds));
  row("attention fwd+bwd tensor cores bf16, WMMA", shape, wmma.seconds, tflops(flop, wmma.seconds),
      ratio("mma.sync", tc.seconds, wmma.seconds) +
          out_and_grad_diff(wmma.out, ref16.out, "dqkv", wmma.dqkv, ref16.dqkv));

  const AttentionParts rows16 = run_parts("tensor_core", B, T);
  const AttentionParts rows32 = run_parts("tensor_core_32", B, T);
  unsetenv("TRAINER_ATTENTION");
  const double fwd_flop = flop / 3, bwd_flop = 2 * flop / 3;
  row("attention fwd mma.sync, bf16 qkv", shape, rows16.forward_s,
      tflops(fwd_flop, rows16.forward_s), "16 rows a warp");
  const bool same_fwd = rows32.out == rows16.out && rows32.lse == rows16.lse;
  row("attention fwd mma.sync, 32 rows/warp", shape, rows32.forward_s,
      tflops(fwd_flop, rows32.forward_s),
      ratio("16 rows a warp", rows16.forward_s, rows32.forward_s) +
          (same_fwd ? "; out, lse: same bits" : "; out, lse: DIFFERENT bits"));
  char times[64];
  std::snprintf(times, sizeof times, "16 rows a warp; %.2fx the forward's time",
                rows16.backward_s / rows16.forward_s);
  row("attention bwd mma.sync, bf16 qkv", shape, rows16.backward_s,
      tflops(bwd_flop, rows16.backward_s), times);
  row("attention bwd mma.sync, dq 32 rows/warp", shape, rows32.backward_s,
      tflops(bwd_flop, rows32.backward_s),
      ratio("16 rows a warp", rows16.backward_s, rows32.backward_s) +
          (rows32.dqkv == rows16.dqkv ? "; dqkv: same bits" : "; dqkv: DIFFERENT bits"));

  // With a bf16 dqkv (bf16 compute's), as cuDNN writes it: mma.sync at 12 heads of 64, and at
  // head size 128 (Llama's and most larger models') in 6 heads, the same width and FLOPs; cuDNN
  // beside each.
  const AttentionHeads wide{6, 128};
  const std::string shape128 = "B" + std::to_string(B) + " T1024 6x128";
  const AttentionParts mma64 = run_parts("tensor_core", B, T, true);
  const AttentionParts mma128 = run_parts("tensor_core", B, T, true, wide);
  unsetenv("TRAINER_ATTENTION");
  bench_cudnn_attention(mma64, B, T, shape, fwd_flop, bwd_flop);
  row("attention fwd mma.sync, head size 128", shape128, mma128.forward_s,
      tflops(fwd_flop, mma128.forward_s), ratio("12x64", mma64.forward_s, mma128.forward_s));
  row("attention bwd mma.sync, head size 128", shape128, mma128.backward_s,
      tflops(bwd_flop, mma128.backward_s), ratio("12x64", mma64.backward_s, mma128.backward_s));
  bench_cudnn_attention(mma128, B, T, shape128, fwd_flop, bwd_flop, wide);
}

// The MLP's GELU at bf16, forward and the backward through it (fc's own backward left out: the
// same in every path). path: "epilogue", "kernels" (both fused ops), "unfused".
struct MlpRun {
  double seconds = 0;
  std::vector<float> dpre;
  cuda::CudaBackend::EpilogueStats epilogues;  // calls with an epilogue: fused in cuBLASLt or not
};

MlpRun run_mlp_gelu(const char* path, int64_t N) {
  const std::string p = path;
  auto be = make_backend("cuda", 0);
  auto& gpu = static_cast<cuda::CudaBackend&>(*be);
  gpu.set_gelu_epilogue(p != "kernels");
  const int64_t C = 768, F = 3072;
  const DType bf = DType::bf16, f32 = DType::f32;
  Buffers buf{*be, {}};
  Tensor x = buf.make({N, C}, bf, 41), wfc = buf.make({F, C}, bf, 42);
  Tensor bfc = buf.make({F}, f32, 43), wp = buf.make({C, F}, bf, 44);
  Tensor dwp = buf.make({C, F}, f32, 45), dbp = buf.make({C}, f32, 46);
  Tensor dy = buf.make({N, C}, f32, 47), h = buf.make({N, F}, bf, 48);
  MlpRun r;
  if (p != "unfused") {
    Tensor pre = buf.make({N, F}, bf, 49), dpre = buf.make({N, F}, bf, 50);
    r.seconds = time_op(*be, [&] {
      be->matmul_gelu_forward(h, pre, x, wfc, bfc);
      be->matmul_gelu_backward(dpre, dwp, dbp, dy, h, wp, pre);
    });
    r.dpre = download(*be, dpre);
    r.epilogues = gpu.epilogue_stats();
  } else {  // what the model ran before the fused ops
    Tensor fch = buf.make({N, F}, f32, 49), dh = buf.make({N, F}, f32, 50);
    Tensor dfch = buf.make({N, F}, f32, 51);
    r.seconds = time_op(*be, [&] {
      be->matmul_forward(fch, x, wfc, bfc);
      be->gelu_forward(h, fch);
      be->zero(dh);
      be->matmul_backward(dh, dwp, dbp, dy, h, wp);
      be->zero(dfch);
      be->gelu_backward(dfch, fch, dh);
    });
    r.dpre = download(*be, dfch);
  }
  return r;
}

void bench_mlp_gelu(int64_t N) {
  const MlpRun unfused = run_mlp_gelu("unfused", N);
  const MlpRun kernels = run_mlp_gelu("kernels", N);
  const MlpRun epilogue = run_mlp_gelu("epilogue", N);
  const double flop = 3 * 2.0 * double(N) * 768 * 3072;  // fc fwd, fc proj dinp and dweight
  const std::string shape = std::to_string(N) + "x768x3072";
  char err[128];
  row("mlp gelu bf16 unfused (reference)", shape, unfused.seconds, tflops(flop, unfused.seconds),
      "");
  std::snprintf(err, sizeof err, "; max rel diff dpre %.1e",
                max_rel_diff(kernels.dpre, unfused.dpre));
  row("mlp gelu bf16 fused, kernels/", shape, kernels.seconds, tflops(flop, kernels.seconds),
      ratio("unfused", unfused.seconds, kernels.seconds) + err);
  // whether cuBLASLt really ran the epilogues, or handed them back to kernels/
  std::snprintf(err, sizeof err, "; max rel diff dpre %.1e; epilogues fused %lld, handed back %lld",
                max_rel_diff(epilogue.dpre, unfused.dpre),
                static_cast<long long>(epilogue.epilogues.fused),
                static_cast<long long>(epilogue.epilogues.handed_back));
  row("mlp gelu bf16 fused, cuBLASLt epilogue", shape, epilogue.seconds,
      tflops(flop, epilogue.seconds), ratio("unfused", unfused.seconds, epilogue.seconds) + err);
}

// A linear layer's bf16 parameter gradients, the attention projection's shape (dinp left out):
// dbias from the dweight GEMM's epilogue or from the bias kernel.
MlpRun run_linear_grads(bool epilogue, int64_t N) {
  auto be = make_backend("cuda", 0);
  auto& gpu = static_cast<cuda::CudaBackend&>(*be);
  gpu.set_bias_grad_epilogue(epilogue);
  const int64_t C = 768;
  Buffers buf{*be, {}};
  Tensor x = buf.make({N, C}, DType::bf16, 61), w = buf.make({C, C}, DType::bf16, 62);
  Tensor dy = buf.make({N, C}, DType::f32, 63), dw = buf.make({C, C}, DType::f32, 64);
  Tensor db = buf.make({C}, DType::f32, 65);
  MlpRun r;  // (dpre holds dbias, summed over the same number of calls in both paths)
  r.seconds = time_op(*be, [&] { be->matmul_backward(Tensor(), dw, db, dy, x, w); });
  r.dpre = download(*be, db);
  r.epilogues = gpu.epilogue_stats();
  return r;
}

void bench_linear_grads(int64_t N) {
  const MlpRun kernel = run_linear_grads(false, N), epilogue = run_linear_grads(true, N);
  const double flop = 2.0 * double(N) * 768 * 768;
  const std::string shape = std::to_string(N) + "x768x768";
  row("dweight+dbias bf16, bias kernel (reference)", shape, kernel.seconds,
      tflops(flop, kernel.seconds), "");
  char err[128];
  std::snprintf(
      err, sizeof err, "; max rel diff dbias %.1e; epilogues fused %lld, handed back %lld",
      max_rel_diff(epilogue.dpre, kernel.dpre), static_cast<long long>(epilogue.epilogues.fused),
      static_cast<long long>(epilogue.epilogues.handed_back));
  row("dweight+dbias bf16, cuBLASLt BGRADB epilogue", shape, epilogue.seconds,
      tflops(flop, epilogue.seconds), ratio("bias kernel", kernel.seconds, epilogue.seconds) + err);
}

void bench_memory_bound(Backend& be, int64_t N) {
  Buffers buf{be, {}};
  // V 50257 classes in rows of 50304, the vocabulary padded to a multiple of 128 as the model's
  const int64_t C = 768, V = 50257, Vp = 50304, P = 124439808;
  Tensor a = buf.make({P}, DType::f32, 21), b = buf.make({P}, DType::f32, 22);
  const double copy_s = time_op(be, [&] { be.copy(b, a); });
  row("device copy (reference)", "124M floats", copy_s, gbps(2.0 * 4 * P, copy_s), "");

  Tensor x = buf.make({N, C}, DType::f32, 23), w = buf.make({C}, DType::f32, 24);
  Tensor bias = buf.make({C}, DType::f32, 25), y = buf.make({N, C}, DType::bf16, 26);
  Tensor mean = buf.make({N}, DType::f32, 27), rstd = buf.make({N}, DType::f32, 28);
  Tensor dy = buf.make({N, C}, DType::f32, 29), dx = buf.make({N, C}, DType::f32, 30);
  Tensor dw = buf.make({C}, DType::f32, 31), db = buf.make({C}, DType::f32, 32);
  const double ln_s = time_op(be, [&] {
    be.layernorm_forward(y, mean, rstd, x, w, bias);
    be.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
  });
  const double ln_bytes = double(N) * C * (4 + 2 + 4 + 4 + 4 + 4 + 4);  // fwd, dinp, params
  row("layernorm fwd (bf16 out) + bwd", std::to_string(N) + "x768", ln_s, gbps(ln_bytes, ln_s),
      share_of(ln_bytes, ln_s, 2.0 * 4 * P, copy_s));
  // Each alone, by the bytes each must move an element: the forward reads x (4) and writes y
  // (2); the backward reads dy, x and dinp (12) and writes dinp (4).
  const double fwd_s = time_op(be, [&] { be.layernorm_forward(y, mean, rstd, x, w, bias); });
  const double bwd_s =
      time_op(be, [&] { be.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd); });
  const double fwd_bytes = double(N) * C * 6, bwd_bytes = double(N) * C * 16;
  row("layernorm fwd (bf16 out)", std::to_string(N) + "x768", fwd_s, gbps(fwd_bytes, fwd_s),
      share_of(fwd_bytes, fwd_s, 2.0 * 4 * P, copy_s));
  row("layernorm bwd", std::to_string(N) + "x768", bwd_s, gbps(bwd_bytes, bwd_s),
      share_of(bwd_bytes, bwd_s, 2.0 * 4 * P, copy_s));

  Buffers logits_buf{be, {}};
  Tensor logits = logits_buf.make({N, Vp}, DType::f32, 33, -4, 4),
         losses = buf.make({N}, DType::f32, 34);
  std::vector<int32_t> tgt(static_cast<size_t>(N));
  for (size_t i = 0; i < tgt.size(); ++i) tgt[i] = static_cast<int32_t>((i * 7919) % V);
  Tensor targets(be.alloc(tgt.size() * 4), {N}, DType::i32, DeviceType::cuda);
  buf.owned.push_back(targets.data);
  be.from_host(targets, tgt.data());
  const double ce_s =
      time_op(be, [&] { be.softmax_cross_entropy(logits, losses, targets, 1.0f, V); });
  // what it must move: the logits read once and their gradient written (the second pass reads
  // the row again only past what the first kept in registers)
  const double ce_bytes = 2.0 * 4 * double(N) * V;
  row("softmax cross-entropy fwd+bwd", std::to_string(N) + "x50304", ce_s, gbps(ce_bytes, ce_s),
      share_of(ce_bytes, ce_s, 2.0 * 4 * P, copy_s));
  Tensor logits16 = logits_buf.make({N, Vp}, DType::bf16, 38, -4, 4);
  const double ce16_s =
      time_op(be, [&] { be.softmax_cross_entropy(logits16, losses, targets, 1.0f, V); });
  row("softmax cross-entropy, bf16 logits", std::to_string(N) + "x50304", ce16_s,
      gbps(ce_bytes / 2, ce16_s),
      ratio("fp32 logits", ce_s, ce16_s) + "; " +
          share_of(ce_bytes / 2, ce16_s, 2.0 * 4 * P, copy_s));

  Tensor m = buf.make({P}, DType::f32, 35, 0, 0.01f), v = buf.make({P}, DType::f32, 36, 0, 0.01f);
  Tensor copy = buf.make({P}, DType::bf16, 37);
  AdamWParams hp;
  hp.lr = 1e-4f, hp.step = 10;
  const double adam_s = time_op(be, [&] { be.adamw_step(a, b, m, v, hp, copy); });
  const double adam_bytes = 7.0 * 4 * P + 2.0 * P;  // read p, g, m, v; write p, m, v, bf16 p
  row("adamw + bf16 copy (124M params)", "124M floats", adam_s, gbps(adam_bytes, adam_s),
      share_of(adam_bytes, adam_s, 2.0 * 4 * P, copy_s));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it is measured, should a later one fail
  int64_t rows = 8192;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rows") rows = std::atoll(argv[i + 1]);
    if (flag == "--reps") g_reps = std::atoi(argv[i + 1]);
    if (flag == "--only") only = argv[i + 1];
  }
  const auto wanted = [&](const char* group) { return only.empty() || only == group; };
  if (!cuda_backend_available()) {
    std::fprintf(stderr, "cuda_ops_bench: no CUDA device here\n");
    return 2;
  }
  std::printf("%-34s %-22s %12s  %-16s %s\n", "op", "shape", "time", "rate", "vs reference");
  auto be = make_backend("cuda", 0);
  if (wanted("gemms")) bench_gemms(*be, rows);
  if (wanted("memory")) bench_memory_bound(*be, rows);
  be.reset();
  if (wanted("mlp")) bench_mlp_gelu(rows);
  if (wanted("grads")) bench_linear_grads(rows);
  if (wanted("attention")) bench_attention(rows);
  if (wanted("cp")) bench_context_attention(rows);
  return 0;
}

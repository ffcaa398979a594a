// cuDNN's fused attention (TRAINER_ATTENTION=cudnn, runtime/cuda/cudnn_attention.h). Here, with no
// device: libcudnn loads at first use, and every descriptor of the forward and backward SDPA
// graphs finalizes (cuDNN checks each operation's shapes and types then). On a GPU: the outputs
// match the cpu backend's bf16 attention, cuDNN (not the fallback) ran the shapes it plans, and
// its statistics serve the tensor-core kernels' backward.
#ifdef TRAINER_HAVE_CUDNN
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <limits>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/cudnn_library.h"
#include "tests/unit/cuda/cuda_test_util.h"

using namespace trainer;
using namespace trainer::cuda::test;

TEST_CASE("cudnn_is_loaded_at_first_use_and_takes_every_sdpa_graph_operation", "[cuda]") {
  const bool loaded_before = dlopen(cuda::cudnn_file_name(), RTLD_NOW | RTLD_NOLOAD) != nullptr;
  INFO(cuda::cudnn_file_name() << " loaded before the first call: " << loaded_before);
  // Nothing loads it unless TRAINER_ATTENTION=cudnn (on a GPU an earlier test may have).
  if (!cuda_backend_available()) CHECK_FALSE(loaded_before);
  const cuda::CudnnLibrary& l = cuda::cudnn();
  CHECK(l.get_version() >= 90000);
  CHECK(&cuda::cudnn() == &l);

  for (const cudnnDataType_t index_math : {CUDNN_DATA_FLOAT, CUDNN_DATA_INT32})
    for (const auto [B, T, NH, HS] : {std::array<int64_t, 4>{2, 128, 3, 64},
                                      {1, 37, 2, 32},
                                      {4, 1024, 12, 64},
                                      {1, 128, 2, 80},
                                      {2, 2048, 16, 128}}) {
      const cuda::AttentionShape s{B, T, NH, HS};
      INFO("B=" << B << " T=" << T << " heads=" << NH << " head size=" << HS);
      // cuDNN's frontend lowers causal SDPA to these operation counts: forward 2 products, 10
      // pointwise (scale, mask 4, softmax 4, the log-sum-exp's add), 2 reductions; backward 5
      // products, 13 pointwise, 1 reduction, 3 reshapes.
      const cuda::SdpaGraph fwd = cuda::sdpa_forward_graph(s, index_math);
      CHECK(fwd.ops.size() == 14);
      CHECK_FALSE(fwd.plan.has_value());
      const cuda::SdpaGraph bwd = cuda::sdpa_backward_graph(s, index_math);
      CHECK(bwd.ops.size() == 22);
      // the fp32 dQ accumulator and rowsum(dout * out), 256-byte aligned
      CHECK(bwd.own_workspace_bytes >= B * NH * T * (HS + 1) * 4);
      CHECK(bwd.own_workspace_bytes % 256 == 0);
    }
}

// The versions and shapes cuDNN's frontend refuses or works around are handed to the kernels.
TEST_CASE("cudnn_versions_with_known_sdpa_limits_hand_the_shape_back", "[cuda]") {
  const cuda::AttentionShape aligned{4, 1024, 12, 64}, ragged{4, 1000, 12, 64};
  const auto check_refused = [](size_t version, const cuda::AttentionShape& s, bool backward,
                                const std::string& why) {
    const std::string refusal = cuda::sdpa_version_refusal(version, s, backward);
    INFO(version << (backward ? " backward" : " forward") << " T=" << s.T << ": " << refusal);
    CHECK(refusal.find(why) != std::string::npos);
  };
  for (const bool backward : {false, true}) {
    CHECK(cuda::sdpa_version_refusal(91900, aligned, backward).empty());
    CHECK(cuda::sdpa_version_refusal(91900, ragged, backward).empty());
    CHECK(cuda::sdpa_version_refusal(91002, aligned, backward).empty());
    check_refused(91000, aligned, backward, "known SDPA bugs");
    check_refused(91001, aligned, backward, "known SDPA bugs");
  }
  // the forward needs neither the dQ accumulator nor the padding mask
  CHECK(cuda::sdpa_version_refusal(90500, ragged, false).empty());
  CHECK(cuda::sdpa_version_refusal(90600, aligned, true).empty());
  check_refused(90500, aligned, true, "dQ accumulator");
  CHECK(cuda::sdpa_version_refusal(91501, aligned, true).empty());
  check_refused(91501, ragged, true, "T % 128");
  CHECK(cuda::sdpa_version_refusal(91600, ragged, true).empty());
}

// The causal mask's fill: -inf from 9.10 on, the lowest float before, as cuDNN's frontend gives.
TEST_CASE("cudnn_sdpa_mask_fill_follows_the_version", "[cuda]") {
  CHECK(cuda::sdpa_mask_fill(91900) == -std::numeric_limits<float>::infinity());
  CHECK(cuda::sdpa_mask_fill(91000) == -std::numeric_limits<float>::infinity());
  CHECK(cuda::sdpa_mask_fill(90900) == std::numeric_limits<float>::lowest());
  CHECK(cuda::sdpa_mask_fill(90000) == std::numeric_limits<float>::lowest());
}

namespace {

// A cuda backend with TRAINER_ATTENTION=cudnn. Unlike cuda_with_attention it does not turn an
// error into a skip: on a machine with a device, a libcudnn that cannot load fails the test.
std::unique_ptr<Backend> cuda_with_cudnn() {
  const char* old = std::getenv("TRAINER_ATTENTION");
  const std::string saved = old ? old : "";
  setenv("TRAINER_ATTENTION", "cudnn", 1);
  std::unique_ptr<Backend> be;
  try {
    be = make_backend("cuda", 0);
  } catch (const std::exception& e) {
    FAIL_CHECK("TRAINER_ATTENTION=cudnn: " << e.what());
  }
  old ? setenv("TRAINER_ATTENTION", saved.c_str(), 1) : unsetenv("TRAINER_ATTENTION");
  return be;
}

const cuda::CudnnAttention& cudnn_of(Backend& be) {
  const auto* attention = dynamic_cast<cuda::CudaBackend&>(be).cudnn_attention();
  REQUIRE(attention != nullptr);
  return *attention;
}

}  // namespace

// bf16 qkv and out (bf16 compute's), dqkv in bf16: cuDNN's numerics differ from the kernels' (it
// scales the fp32 scores, they pre-scale q) but both are within bf16 rounding of the cpu's.
// [cudnn]: scripts/gpu-check.sh runs it in a process of its own (a fault inside cuDNN would leave
// the CUDA context unusable for the tests after it).
TEST_CASE("cuda_cudnn_attention_matches_cpu_and_runs_in_cudnn", "[cuda][bf16][cudnn]") {
  if (!cuda_or_skip()) return;
  auto gpu = cuda_with_cudnn();
  auto kernels = cuda_with_attention("tensor_core");
  REQUIRE(gpu);
  REQUIRE(kernels);
  const cuda::CudnnAttention& cudnn = cudnn_of(*gpu);
  INFO("cuDNN " << cudnn.version());
  // the report's hardware.kernels names it
  CHECK(
      gpu->kernels().at("attention").rfind("cudnn (cuDNN " + std::to_string(cudnn.version()), 0) ==
      0);
  CHECK(kernels->kernels().at("attention") == "tensor_core");
  cpu::CpuBackend ref;
  for (const auto [B, T, NH, HS] : {std::array<int64_t, 4>{2, 128, 3, 64},
                                    {1, 256, 2, 32},
                                    {2, 130, 2, 64},
                                    {1, 37, 4, 64},
                                    {2, 256, 2, 128}}) {
    const int64_t C = NH * HS;
    const std::string at = " [T=" + std::to_string(T) + " HS=" + std::to_string(HS) + "]";
    const cuda::CudnnAttention::Stats before = cudnn.stats();
    auto qkv = floats_of(bf16_bits_of(randoms(B * T * 3 * C, 4)));
    auto dy = randoms(B * T * C, 5), dq = randoms(B * T * 3 * C, 6);
    std::vector<float> att(static_cast<size_t>(B * NH * T * T));
    std::vector<uint16_t> out(static_cast<size_t>(B * T * C));
    Tensor gq = upload(*gpu, bf16_bits_of(qkv), {B, T, 3 * C}, DType::bf16);
    Tensor gout = poisoned_bf16(*gpu, {B, T, C});
    Tensor glse = poisoned(*gpu, gpu->attention_state_shape(B, NH, T, HS));
    Tensor gdy = upload(*gpu, dy, {B, T, C}), gdq = poisoned_bf16(*gpu, {B, T, 3 * C});
    gpu->attention_forward(gout, glse, gq, int(NH));
    gpu->attention_backward(gdq, gdy, gq, gout, glse, int(NH));
    ref.attention_forward(host_bf16(out, {B, T, C}), host(att, {B, NH, T, T}),
                          host(qkv, {B, T, 3 * C}), int(NH));
    ref.attention_backward(host(dq, {B, T, 3 * C}), host(dy, {B, T, C}), host(qkv, {B, T, 3 * C}),
                           host_bf16(out, {B, T, C}), host(att, {B, NH, T, T}), int(NH));
    check_close(download_bf16(*gpu, gout), floats_of(out), kBf16Tol, "cudnn attention out" + at);
    check_close(download_bf16(*gpu, gdq), dq, 2 * kBf16Tol, "cudnn attention dqkv" + at);
    const cuda::CudnnAttention::Stats after = cudnn.stats();
    INFO("cuDNN ran forward " << after.forward - before.forward << ", backward "
                              << after.backward - before.backward << ", refused "
                              << after.refused - before.refused << at);
    if (T % 128 == 0) {  // shapes every cuDNN 9 plans: cuDNN must have run them
      CHECK(after.forward == before.forward + 1);
      CHECK(after.backward == before.backward + 1);
    } else {
      CHECK(after.forward + after.backward + after.refused ==
            before.forward + before.backward + before.refused + 2);
    }

    // The statistics are the kernels' own (the log-sum-exp of the scaled scores): the
    // tensor-core kernels' forward gives the same, and their backward from cuDNN's forward the
    // same gradient.
    Tensor klse = poisoned(*kernels, kernels->attention_state_shape(B, NH, T, HS));
    Tensor kout = poisoned_bf16(*kernels, {B, T, C}), kdq = poisoned_bf16(*kernels, {B, T, 3 * C});
    Tensor kq = upload(*kernels, bf16_bits_of(qkv), {B, T, 3 * C}, DType::bf16);
    kernels->attention_forward(kout, klse, kq, int(NH));
    check_close(download(*gpu, glse), download(*kernels, klse), kBf16Tol,
                "cudnn vs tensor_core log-sum-exp" + at);
    Tensor kdy = upload(*kernels, dy, {B, T, C});
    Tensor kglse = upload(*kernels, download(*gpu, glse), {B, NH, T});
    Tensor kgout =
        upload(*kernels, bf16_bits_of(download_bf16(*gpu, gout)), {B, T, C}, DType::bf16);
    kernels->attention_backward(kdq, kdy, kq, kgout, kglse, int(NH));
    check_close(download_bf16(*kernels, kdq), dq, 2 * kBf16Tol,
                "tensor_core backward from cuDNN's forward" + at);
  }
}

#endif  // TRAINER_HAVE_CUDNN

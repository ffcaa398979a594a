// Data parallelism and ZeRO 1-3 on the cuda backend, with two dp ranks as threads on one GPU
// (and tensor parallelism with two tp ranks, pipeline parallelism with two stages, context
// parallelism with two cp ranks):
// their communicator is Gloo on host copies of the device buffers (DeviceStagingComm; NCCL takes
// one rank per device), so what runs on the device is everything above the Comm: gradient
// buckets, ZeRO's staging copies, adds, releases (fills) and gathers, the bf16 copy's refresh,
// fp8's amax reduction, the pipeline stages' exchanges and tied-embedding sum, and the
// checkpoint's host copy. Each case is compared with the same run
// on the cpu backend, and each ZeRO stage with stage 0 on cuda.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "tests/unit/cuda/cuda_test_util.h"
#include "tests/unit/small_train_config.h"
#include "tests/unit/train/dp_trace.h"
#ifdef TRAINER_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#include "tests/unit/cuda/device_staging_comm.h"
#endif

using namespace trainer;
using namespace trainer::cuda::test;

#ifdef TRAINER_HAVE_CUDA
namespace {

constexpr int kDp = 2, kSteps = 3;

double rel(double a, double b) {
  return std::fabs(a - b) / std::max(std::fabs(b), 1e-12);
}

std::vector<testing::DpTrace> run(const config::RunConfig& cfg, bool on_gpu,
                                  testing::Split split = testing::Split::dp) {
  // each rank's thread: its backend's stream, for its further communicator (Split::cp)
  thread_local cudaStream_t stream = nullptr;
  return testing::run_dp_ranks(
      cfg, kDp, kSteps,
      [&](std::unique_ptr<dist::Comm>& comm) -> std::unique_ptr<Backend> {
        if (!on_gpu) return std::make_unique<cpu::CpuBackend>();
        auto gpu = std::make_unique<cuda::CudaBackend>(0);
        stream = gpu->stream();
        comm = std::make_unique<DeviceStagingComm>(std::move(comm), gpu->stream());
        return gpu;
      },
      on_gpu ? "cuda" : "cpu", split,
      [&](std::unique_ptr<dist::Comm> comm) -> std::unique_ptr<dist::Comm> {
        if (!on_gpu) return comm;
        return std::make_unique<DeviceStagingComm>(std::move(comm), stream);
      });
}

// One rank's cuda trace `b` against the cpu's `a`: losses and the resumed eval within tol, norms
// within 5 tol, and the weights' shard the same size. (Not "the loss goes down": over 3 steps of
// fresh batches it need not, and did not for tp 2 and pp 2 on the cpu backend either.)
void check_against_cpu(const testing::DpTrace& a, const testing::DpTrace& b, double tol,
                       const std::string& label) {
  std::ostringstream what;
  what << label << ": cpu/cuda losses";
  for (size_t s = 0; s < a.losses.size(); ++s) what << " " << a.losses[s] << "/" << b.losses[s];
  what << "; norms";
  for (size_t s = 0; s < a.norms.size(); ++s) what << " " << a.norms[s] << "/" << b.norms[s];
  what << "; resumed eval " << a.resumed_eval << "/" << b.resumed_eval;
  INFO(what.str());
  REQUIRE(b.losses.size() == size_t(kSteps));
  for (size_t s = 0; s < a.losses.size(); ++s) {
    CHECK(rel(b.losses[s], a.losses[s]) < tol);
    CHECK(rel(b.norms[s], a.norms[s]) < 5 * tol);
  }
  CHECK(rel(b.resumed_eval, a.resumed_eval) < tol);
  CHECK(b.owned_params.size() == a.owned_params.size());
}

}  // namespace
#endif

TEST_CASE("cuda_data_parallel_and_zero_stages_match_cpu_with_two_ranks_on_one_gpu",
          "[cuda][zero]") {
  auto probe = cuda_or_skip();
  if (!probe) return;
#ifdef TRAINER_HAVE_CUDA
  const bool fp8 = probe->supports_fp8();
  probe.reset();
  struct Case {
    int zero;
    const char* precision;
  };
  std::vector<Case> cases = {{0, "fp32"}, {1, "fp32"}, {2, "fp32"}, {3, "fp32"},
                             {0, "bf16"}, {2, "bf16"}, {3, "bf16"}};
  if (fp8) cases.push_back({3, "fp8"});
  std::vector<testing::DpTrace> zero0_fp32, zero0_bf16;
  for (const Case c : cases) {
    // d_model 64 over 2 heads: head size 32, which the tensor-core attention takes in bf16.
    config::RunConfig cfg = trainer::testing::small_train_config(64, 16, 2, 64, 2);
    cfg.parallel.zero = c.zero;
    cfg.precision.compute = c.precision;
    cfg.train.grad_clip = 0.05;  // small enough to clip: AdamW reads the gradients scaled
    const std::vector<testing::DpTrace> ref = run(cfg, false), gpu = run(cfg, true);
    // cuBLASLt and the device's expf against OpenBLAS: fp32 agrees to ~1e-6 over these steps;
    // bf16 and fp8 round operands, so a last-bit difference moves whole bf16/e4m3 steps.
    const bool fp32 = std::string(c.precision) == "fp32";
    const double tol = fp32 ? 1e-4 : 2e-2;
    std::vector<testing::DpTrace>* stage0 =
        fp32 ? &zero0_fp32 : (std::string(c.precision) == "bf16" ? &zero0_bf16 : nullptr);
    if (stage0 && c.zero == 0) *stage0 = gpu;
    for (int r = 0; r < kDp; ++r) {
      const testing::DpTrace &a = ref[size_t(r)], &b = gpu[size_t(r)];
      std::ostringstream label;
      label << "zero " << c.zero << ", " << c.precision << ", rank " << r;
      check_against_cpu(a, b, tol, label.str());
      INFO(label.str());
      // Every ZeRO stage does stage 0's arithmetic on the same device: only the gradient sum's
      // grouping and the norm's partial sums differ.
      if (stage0 && c.zero > 0 && !stage0->empty()) {
        const testing::DpTrace& z0 = (*stage0)[size_t(r)];
        for (size_t s = 0; s < b.losses.size(); ++s) {
          CHECK(rel(b.losses[s], z0.losses[s]) < 1e-5);
          CHECK(rel(b.norms[s], z0.norms[s]) < 1e-5);
        }
      }
    }
  }
#endif
}

// Two tensor-parallel ranks as threads on one GPU (their "tp" communicator staged through host
// copies as above), with and without sequence parallelism: the row-parallel layers' all-reduces
// (or reduce-scatters and gathers) on device activations, the grad norm over tp, the fp8 weight
// scales seeded from the master weights; against the cpu tp run.
TEST_CASE("cuda_tensor_parallel_matches_cpu_with_two_ranks_on_one_gpu", "[cuda][tp]") {
  auto probe = cuda_or_skip();
  if (!probe) return;
#ifdef TRAINER_HAVE_CUDA
  std::vector<std::string> precisions = {"fp32", "bf16"};
  if (probe->supports_fp8()) precisions.push_back("fp8");
  probe.reset();
  // Precisions outer: fp8, the last, cannot hide the others' results should it stop the case.
  for (const std::string& precision : precisions)
    for (const testing::Split split : {testing::Split::tp, testing::Split::tp_sp}) {
      // d_model 64 over 2 heads: one head per tp rank, of size 32 (the tensor-core attention's)
      config::RunConfig cfg = trainer::testing::small_train_config(64, 16, 2, 64, 2);
      cfg.precision.compute = precision;
      cfg.train.grad_clip = 0.05;
      const auto ref = run(cfg, false, split), gpu = run(cfg, true, split);
      const double tol = precision == "fp32" ? 1e-4 : 2e-2;
      const std::string name = split == testing::Split::tp_sp ? "tp 2 + sp, " : "tp 2, ";
      for (int r = 0; r < kDp; ++r)
        check_against_cpu(ref[size_t(r)], gpu[size_t(r)], tol,
                          name + precision + ", rank " + std::to_string(r));
    }
#endif
}

TEST_CASE("cuda_pipeline_parallel_matches_cpu_with_two_stages_on_one_gpu", "[cuda][pp]") {
  auto probe = cuda_or_skip();
  if (!probe) return;
#ifdef TRAINER_HAVE_CUDA
  probe.reset();
  // 1F1B, and the interleaved schedule with 2 chunks a stage (its output-gradient inbox)
  for (const std::string schedule : {"1f1b", "interleaved"})
    for (const std::string precision : {"fp32", "bf16"}) {
      config::RunConfig cfg =
          trainer::testing::small_train_config(64, 16, schedule == "interleaved" ? 4 : 2, 64, 2);
      cfg.precision.compute = precision;
      trainer::testing::two_stage_pipeline(cfg, schedule);
      const auto ref = run(cfg, false, testing::Split::pp),
                 gpu = run(cfg, true, testing::Split::pp);
      const double tol = precision == "fp32" ? 1e-4 : 2e-2;
      for (int r = 0; r < kDp; ++r)
        check_against_cpu(ref[size_t(r)], gpu[size_t(r)], tol,
                          "pp 2, " + schedule + ", " + precision + ", stage " + std::to_string(r));
    }
#endif
}

// Two context-parallel ranks as threads on one GPU (their "cp" and replica communicators staged
// through host copies): each its two chunks of every sequence, qkv gathered and its gradient
// reduce-scattered on device buffers, the cp attention kernels (the default: flash, head size 32,
// on tensor cores in bf16 with chunks of 32 rows (seq_len 128), else on CUDA cores;
// TRAINER_ATTENTION=reference: kernels/context_attention.cu's); against the cpu cp run, in fp32
// and bf16.
TEST_CASE("cuda_context_parallel_matches_cpu_with_two_ranks_on_one_gpu", "[cuda][cp]") {
  auto probe = cuda_or_skip();
  if (!probe) return;
#ifdef TRAINER_HAVE_CUDA
  probe.reset();
  const char* old = std::getenv("TRAINER_ATTENTION");
  const std::string saved = old ? old : "";
  for (const std::string kernel : {"tensor_core", "reference"}) {
    setenv("TRAINER_ATTENTION", kernel.c_str(), 1);  // (each run's backends read it)
    for (const std::string precision : {"fp32", "bf16"})
      for (const int seq_len : {16, 128}) {
        config::RunConfig cfg = trainer::testing::small_train_config(64, seq_len, 2, 64, 2);
        cfg.precision.compute = precision;
        cfg.parallel.cp = kDp;
        cfg.train.grad_clip = 0.05;
        const auto ref = run(cfg, false, testing::Split::cp),
                   gpu = run(cfg, true, testing::Split::cp);
        for (int r = 0; r < kDp; ++r)
          check_against_cpu(ref[size_t(r)], gpu[size_t(r)], precision == "fp32" ? 1e-4 : 2e-2,
                            "cp 2, " + kernel + ", " + precision + ", seq_len " +
                                std::to_string(seq_len) + ", rank " + std::to_string(r));
      }
  }
  old ? setenv("TRAINER_ATTENTION", saved.c_str(), 1) : unsetenv("TRAINER_ATTENTION");
#endif
}

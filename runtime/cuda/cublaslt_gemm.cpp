// LtGemm: row-major C = op(A) op(B) mapped onto column-major cuBLASLt as C^T = op(B)^T op(A)^T,
// i.e. the operands swap places and keep their transposes.
#include "runtime/cuda/cublaslt_gemm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/core/algo_trials.h"
#include "runtime/core/check.h"
#include "runtime/core/gemm_args.h"
#include "runtime/cuda/cublaslt_library.h"
#include "runtime/cuda/cuda_check.h"

#define CUBLAS_CHECK(call)                                                                     \
  do {                                                                                         \
    const cublasStatus_t st_ = (call);                                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::trainer::cuda::throw_cuda_error(#call, ::trainer::cuda::cublaslt().status_string(st_), \
                                        __FILE__, __LINE__);                                   \
  } while (0)

namespace trainer::cuda {

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  // The heuristic's algorithms, best first; a call that refuses one moves on to the next, for
  // this shape from then on. Empty: none left (only for epilogues: the caller's path without).
  std::vector<cublasLtMatmulAlgo_t> algos;
  // With tune_algorithms: the trials over algos, the calls timed but not yet read (a call's
  // events are read once the device has passed them, never waited for), and spare events.
  struct Timing {
    int algo;
    cudaEvent_t start, end;
  };
  std::unique_ptr<AlgoTrials> trials;
  std::vector<Timing> pending;
  std::vector<cudaEvent_t> spare;
  std::string shape;  // for the log line that reports the trials' outcome
  cudaEvent_t take_event() {
    if (spare.empty()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = spare.back();
    spare.pop_back();
    return e;
  }
  // The algorithm at index i refused a call: out of algos, the trials and the pending timings.
  void drop_algo(int i) {
    algos.erase(algos.begin() + i);
    if (!trials) return;
    trials->drop(i);
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->algo == i) {
        spare.push_back(it->start), spare.push_back(it->end);
        it = pending.erase(it);
      } else {
        if (it->algo > i) --it->algo;
        ++it;
      }
    }
  }
  ~Plan() {
    for (const Timing& t : pending) cudaEventDestroy(t.start), cudaEventDestroy(t.end);
    for (cudaEvent_t e : spare) cudaEventDestroy(e);
    if (a) cublaslt().layout_destroy(a);
    if (b) cublaslt().layout_destroy(b);
    if (c) cublaslt().layout_destroy(c);
    if (desc) cublaslt().desc_destroy(desc);
  }
};

namespace {

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                              int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(cublaslt().layout_create(&l, type, static_cast<uint64_t>(rows),
                                        static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublaslt().layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                 sizeof(count)));
    CUBLAS_CHECK(cublaslt().layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &stride, sizeof(stride)));
  }
  return l;
}

// Largest power-of-two byte alignment of p, up to 256 (a null pointer counts as 256).
int alignment_of(const void* p) {
  const auto bits = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && (bits % static_cast<uintptr_t>(align)) != 0) align /= 2;
  return align;
}

cublasLtEpilogue_t epilogue_of(const LtGemmArgs& g) {
  // cuBLASLt's B is our a (the column-major swap), so our a's bias gradient is its BGRADB
  if (g.bias_grad) return CUBLASLT_EPILOGUE_BGRADB;
  switch (g.epilogue) {
    case LtGemmArgs::Epilogue::gelu_aux:
      return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case LtGemmArgs::Epilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case LtGemmArgs::Epilogue::none:
      break;
  }
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// The plan's epilogue: its kind, the bias type (fp32, or bf16 with bias_bf16) and the aux
// matrix's leading dimension (packed: the column-major view's n rows). The pointers follow
// (set_pointers), before the heuristic too: it reads their alignment.
void set_epilogue(cublasLtMatmulDesc_t desc, const LtGemmArgs& g) {
  const cublasLtEpilogue_t epi = epilogue_of(g);
  CUBLAS_CHECK(
      cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (g.bias || g.bias_grad) {
    const cudaDataType_t bias_type = g.bias_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    CUBLAS_CHECK(cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                               &bias_type, sizeof(bias_type)));
  }
  if (g.aux) {
    const int64_t ld = g.n;
    CUBLAS_CHECK(
        cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
}

// The epilogue's pointers, and fp8's scales (the operands swap places in the column-major view:
// b is cuBLASLt's A).
void set_pointers(cublasLtMatmulDesc_t desc, const LtGemmArgs& g) {
  if (const void* bias = g.bias_grad ? g.bias_grad : g.bias)  // (never both: run() checks)
    CUBLAS_CHECK(cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof(bias)));
  if (g.aux)
    CUBLAS_CHECK(cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                               &g.aux, sizeof(g.aux)));
  if (g.fp8_inputs) {
    CUBLAS_CHECK(cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                               &g.b_scale, sizeof(g.b_scale)));
    CUBLAS_CHECK(cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                               &g.a_scale, sizeof(g.a_scale)));
  }
}

// Tells the heuristic how aligned the matrices are (it assumes 256 bytes otherwise, and may pick
// a kernel that faults on less). cuBLASLt's A is our b, its B our a, its C and D our c (C may be
// c_in: the caller passes the smaller of the two alignments).
void set_min_alignment(cublasLtMatmulPreference_t pref, int a, int b, int c) {
  const auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, int bytes) {
    const auto v = static_cast<uint32_t>(bytes);
    CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, attr, &v, sizeof(v)));
  };
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, b);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, a);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c);
}

}  // namespace

LtGemm::LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes, bool tune_algorithms)
    : stream_(stream),
      workspace_(workspace),
      workspace_bytes_(workspace_bytes),
      tune_algorithms_(tune_algorithms) {
  CUBLAS_CHECK(cublaslt().create(&handle_));
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (handle_) cublaslt().destroy(handle_);
}

LtGemm::Plan* LtGemm::plan_for(const LtGemmArgs& g, const Alignment& alignment) {
  const Key key{g.trans_a,
                g.trans_b,
                g.m,
                g.n,
                g.k,
                g.lda,
                g.ldb,
                g.ldc,
                g.batch,
                g.stride_a,
                g.stride_b,
                g.stride_c,
                g.bias != nullptr,
                g.bias_bf16,
                g.bias_grad != nullptr,
                g.bf16_inputs,
                g.bf16_output,
                g.fp8_inputs,
                g.epilogue,
                alignment};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  // Column-major view: D'[n x m] = op(B)' [n x k] * op(A)' [k x m].
  CUBLAS_CHECK(cublaslt().desc_create(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublaslt().desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                             sizeof(op_first)));
  CUBLAS_CHECK(cublaslt().desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                             sizeof(op_second)));
  const bool fused = epilogue_of(g) != CUBLASLT_EPILOGUE_DEFAULT;
  if (fused) set_epilogue(plan->desc, g);
  if (g.fp8_inputs) {
    // Hopper's fp8 kernels are "TN" only: the column-major first operand (our b) transposed.
    TRAINER_CHECK(g.trans_b && !g.trans_a && g.batch == 1 &&
                      (!fused || epilogue_of(g) == CUBLASLT_EPILOGUE_BIAS),
                  "LtGemm: fp8 needs trans_b, no trans_a, no batch and no epilogue but a bias");
    const int8_t fast_accum = 1;  // Transformer Engine's choice for the forward GEMM
    CUBLAS_CHECK(cublaslt().desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                               &fast_accum, sizeof(fast_accum)));
  }
  const cudaDataType_t in_type = g.fp8_inputs    ? CUDA_R_8F_E4M3
                                 : g.bf16_inputs ? CUDA_R_16BF
                                                 : CUDA_R_32F;
  // Stored shapes (column-major rows x cols) of the row-major operands.
  plan->a =
      layout(in_type, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb, g.batch, g.stride_b);
  plan->b =
      layout(in_type, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda, g.batch, g.stride_a);
  plan->c = layout(g.bf16_output ? CUDA_R_16BF : CUDA_R_32F, g.n, g.m, g.ldc, g.batch, g.stride_c);

  set_pointers(plan->desc, g);
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublaslt().preference_create(&pref));
  const uint64_t ws = workspace_bytes_;
  CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof(ws)));
  set_min_alignment(pref, alignment.a, alignment.b, alignment.c);
  constexpr int kAlgos = 8;  // a few to fall back on, should a call refuse the best one
  cublasLtMatmulHeuristicResult_t results[kAlgos] = {};
  int found = 0;
  const cublasStatus_t st = cublaslt().algo_get_heuristic(
      handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, kAlgos, results, &found);
  CUBLAS_CHECK(cublaslt().preference_destroy(pref));
  if (st == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->algos.push_back(results[i].algo);
  if (plan->algos.empty() && !fused) {
    throw CudaError("cuBLASLt has no algorithm for gemm m=" + std::to_string(g.m) +
                    " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) + " (" +
                    cublaslt().status_string(st) + ")");
  }
  if (tune_algorithms_ && plan->algos.size() > 1) {
    plan->trials = std::make_unique<AlgoTrials>(static_cast<int>(plan->algos.size()));
    plan->shape = "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                  " k=" + std::to_string(g.k) + (g.trans_a ? " trans_a" : "") +
                  (g.trans_b ? " trans_b" : "") + (fused ? " with an epilogue" : "");
  }
  return (plans_[key] = std::move(plan)).get();
}

void LtGemm::collect_timings(Plan& plan) {
  auto& pending = plan.pending;
  for (auto it = pending.begin(); it != pending.end();) {
    const cudaError_t done = cudaEventQuery(it->end);
    if (done == cudaErrorNotReady) {
      (void)cudaGetLastError();  // (cleared, as nccl_comm.cu's event_done does)
      ++it;
      continue;
    }
    CUDA_CHECK(done);
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, it->start, it->end));
    plan.trials->record(it->algo, ms);
    plan.spare.push_back(it->start), plan.spare.push_back(it->end);
    it = pending.erase(it);
  }
  if (!plan.trials->settled()) return;
  // A shape moved off the heuristic's first choice is worth a line (TRAINER_GEMM_AUTOTUNE is
  // asked for); one that stays is not.
  const AlgoTrials& t = *plan.trials;
  spdlog::log(t.winner() == 0 ? spdlog::level::debug : spdlog::level::info,
              "cuBLASLt gemm {}: algorithm {} of the heuristic's {} (median {:.3f} ms) in place "
              "of its first ({:.3f} ms)",
              plan.shape, t.winner(), t.candidates(), t.winner_ms(), t.first_ms());
}

bool LtGemm::refuses_epilogue(const LtGemmArgs& g) {
  return (g.epilogue != LtGemmArgs::Epilogue::none && g.n % 8 != 0) || alignment_of(g.bias) < 16 ||
         alignment_of(g.bias_grad) < 16 || alignment_of(g.aux) < 16;
}

bool LtGemm::run(const LtGemmArgs& args) {
  const LtGemmArgs g = packed_gemm_args(args);
  // a bias gradient over no rows (k) or no columns (n) would be left unwritten: not fused here
  if (g.bias_grad && (g.k == 0 || g.n == 0)) return false;
  if (g.m == 0 || g.n == 0) return true;
  TRAINER_CHECK(g.k > 0, "LtGemm: k == 0 is handled by the caller");
  TRAINER_CHECK(!g.bf16_output || g.bf16_inputs || g.fp8_inputs,
                "LtGemm: a bf16 output needs bf16 or fp8 inputs");
  const bool gelu = g.epilogue != LtGemmArgs::Epilogue::none;
  TRAINER_CHECK(gelu == (g.aux != nullptr) && (!gelu || g.batch == 1) &&
                    (g.epilogue != LtGemmArgs::Epilogue::dgelu || !g.bias),
                "LtGemm: a GELU epilogue takes aux, no batch, and dgelu no bias");
  TRAINER_CHECK(!g.bias_grad || (g.trans_a && !g.bias && !gelu && g.batch == 1 && !g.fp8_inputs),
                "LtGemm: a bias gradient takes trans_a, no other epilogue and no batch");
  const bool fused = epilogue_of(g) != CUBLASLT_EPILOGUE_DEFAULT;
  if (fused && refuses_epilogue(g)) return false;
  const int c_alignment = std::min(alignment_of(g.c), g.c_in ? alignment_of(g.c_in) : 256);
  Plan* plan = plan_for(g, {alignment_of(g.a), alignment_of(g.b), c_alignment,
                            alignment_of(g.bias_grad ? g.bias_grad : g.bias), alignment_of(g.aux)});
  set_pointers(plan->desc, g);
  if (plan->trials && !plan->trials->settled()) collect_timings(*plan);
  cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  while (!plan->algos.empty()) {
    // In trials, the next algorithm in turn, timed; then the winner (else the heuristic's first).
    const int i = plan->trials ? plan->trials->next() : 0;
    Plan::Timing timing{i, nullptr, nullptr};
    if (plan->trials && !plan->trials->settled()) {
      timing.start = plan->take_event(), timing.end = plan->take_event();
      CUDA_CHECK(cudaEventRecord(timing.start, stream_));
    }
    st = cublaslt().matmul(handle_, plan->desc, &g.alpha, g.b, plan->a, g.a, plan->b, &g.beta,
                           g.c_in ? g.c_in : g.c, plan->c, g.c, plan->c, &plan->algos[i],
                           workspace_, workspace_bytes_, stream_);
    const bool refused = st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE;
    if (timing.start) {
      if (refused) {
        plan->spare.push_back(timing.start), plan->spare.push_back(timing.end);
      } else {
        CUDA_CHECK(cudaEventRecord(timing.end, stream_));
        plan->pending.push_back(timing);
      }
    }
    // An algorithm the heuristic offered but the call refuses (checked before any launch): the
    // next one, for this shape from now on.
    if (!refused) break;
    plan->drop_algo(i);
  }
  if (plan->algos.empty()) {
    if (fused) return false;  // the caller's path without the epilogue
    throw CudaError("cuBLASLt refused every algorithm it offered for gemm m=" +
                    std::to_string(g.m) + " n=" + std::to_string(g.n) +
                    " k=" + std::to_string(g.k) + " (" + cublaslt().status_string(st) + ")");
  }
  CUBLAS_CHECK(st);
  return true;
}

}  // namespace trainer::cuda

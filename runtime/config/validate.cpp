// validate(): per-key values, settings that depend on each other, the grid shape and data.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "runtime/config/field_value.h"
#include "runtime/config/validate_internal.h"
#include "runtime/core/attention_state.h"
#include "runtime/core/env_switch.h"

namespace trainer::config {
namespace {

void check_names(const RunConfig& c) {
  if (c.run.name.empty()) fail("run.name = \"\": must not be empty");
  if (c.run.out_dir.empty()) fail("run.out_dir = \"\": must not be empty");
}

void check_device_settings(const RunConfig& c) {
  const std::string& device = c.hardware.device;
  if (c.precision.compute == "fp8" && device != "cuda" && !emulated_fp8_for_tests(c))
    fail(
        "precision.compute = fp8 needs hardware.device = cuda (fp8 GEMMs run on sm_90 GPUs only), "
        "but hardware.device = " +
        device + "; use fp32 or bf16 on cpu");
  if (c.distributed.backend == "nccl" && device != "cuda")
    fail("distributed.backend = nccl needs hardware.device = cuda, but hardware.device = " +
         device + "; use gloo or auto");
  if (c.distributed.backend == "gloo" && device == "cuda")
    fail(
        "distributed.backend = gloo needs hardware.device = cpu: on cuda the data- and "
        "tensor-parallel groups' device buffers go through NCCL (the world group's host values "
        "through Gloo either way); use nccl or auto");
  // The two settings whose runs differ in their last bits (every other kernel reduces in a fixed
  // order, and cuBLASLt's heuristic picks one algorithm per shape), read as the backend reads them.
  if (!c.run.deterministic || device != "cuda") return;
  bool cudnn = false, autotune = false;
  try {
    cudnn = attention_kernel_from_env() == AttentionKernel::cudnn;
    autotune = gemm_autotune_from_env();
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  if (cudnn)
    fail(
        "run.deterministic = true, but TRAINER_ATTENTION = cudnn: cuDNN's attention backward "
        "accumulates with atomics, so two runs differ in their last bits; unset TRAINER_ATTENTION "
        "(tensor_core, bit for bit reproducible), or run.deterministic = false");
  if (autotune)
    fail(
        "run.deterministic = true, but TRAINER_GEMM_AUTOTUNE = 1: the GEMM algorithms are picked "
        "by timing, which may pick others in another run; unset it, or run.deterministic = false");
}

// Sizes whose products the runtime keeps in 64-bit integers (parameter counts, tokens per step,
// the largest activation): far beyond anything trainable, but an int64 overflow would turn them
// into nonsense, so they are capped here.
void check_sizes(const RunConfig& c) {
  constexpr double kMax = 1LL << 40;
  const ModelConfig& m = c.model;
  const double C = m.d_model, ffn = 1.0 * m.d_model * m.ffn_mult;
  // A block's MLP is num_experts MLPs (and a router [E, C]) with experts, one without.
  const double experts = std::max(1, m.moe.num_experts);
  const double router = m.moe.num_experts > 0 ? experts * C : 0;
  const double params = 1.0 * m.n_layer * (4 * C * C + experts * 2 * C * ffn + router) +
                        (1.0 * m.vocab_size + m.seq_len) * C;
  const double rows = 1.0 * c.train.micro_batch * m.seq_len;
  const double tokens = rows * c.train.grad_accum * std::max(1, c.parallel.dp);
  // (the experts' buffers hold up to top_k rows a token)
  const double choices = m.moe.num_experts > 0 ? std::max(1, m.moe.top_k) : 1;
  const double activation = rows * std::max({1.0 * m.vocab_size + m.make_vocab_size_divisible_by,
                                             choices * ffn, 1.0 * m.n_head * m.seq_len});
  auto cap = [&](double v, const std::string& what) {
    if (v > kMax) {
      std::ostringstream os;
      os << what << " = " << v << " is above 2^40; no run of this size fits a device";
      fail(os.str());
    }
  };
  cap(params,
      "the parameter count (from model.n_layer, d_model, ffn_mult, moe.num_experts, vocab_size, "
      "seq_len)");
  cap(tokens, "the tokens per step train.micro_batch * grad_accum * dp * model.seq_len");
  cap(activation,
      "the largest activation train.micro_batch * model.seq_len * max(vocab, ffn width (times "
      "moe.top_k with experts), n_head * seq_len)");
}

}  // namespace

void check_output_dir(const std::string& key, const std::string& dir) {
  namespace fs = std::filesystem;
  // The longest path a run writes below the directory: "/step_<8 or more digits>.tmp/rank_<5 or
  // more digits>.safetensors.tmp.<12 hex digits>" (about 65 characters), with room to spare. Found
  // here, not at the first checkpoint after hours of training.
  constexpr size_t kBelow = 128;
  if (dir.empty()) fail(key + " = \"\": expected a directory path");
  if (dir.size() + kBelow >= PATH_MAX)
    fail(key + " = \"" + dir.substr(0, 60) + "...\": " + std::to_string(dir.size()) +
         " characters; the files a run writes below it take up to " + std::to_string(kBelow) +
         " more, past the system's limit of " + std::to_string(PATH_MAX - 1) +
         " for a path (PATH_MAX)");
  for (const fs::path& part : fs::path(dir))
    if (part.native().size() > NAME_MAX)
      fail(key + " = \"" + dir + "\": the name " + part.native().substr(0, 40) + "... has " +
           std::to_string(part.native().size()) + " characters, more than the " +
           std::to_string(NAME_MAX) + " a file name may have (NAME_MAX)");
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(dir, ec)) && !fs::exists(dir, ec))
    fail(key + " = \"" + dir + "\": a symbolic link to " + fs::read_symlink(dir, ec).string() +
         ", which does not exist");
  fs::path p = fs::absolute(dir, ec);
  if (ec) fail(key + " = \"" + dir + "\": " + ec.message());
  for (; !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec)) break;
    if (p == p.parent_path()) break;
  }
  if (!fs::is_directory(p, ec))
    fail(key + " = \"" + dir + "\": " + p.string() +
         " is not a directory, so it cannot be created");
  if (access(p.c_str(), W_OK | X_OK) != 0)
    fail(key + " = \"" + dir + "\": " + p.string() + " is not writable (" + std::strerror(errno) +
         ")");
  // access() says yes to root everywhere, /proc and /sys included: make a directory of a name no
  // one else uses where the missing ones would go, and take it away again.
  if (fs::exists(fs::absolute(dir, ec), ec)) return;
  std::string probe = (p / ".trainer-probe-XXXXXX").string();
  if (::mkdtemp(probe.data()) == nullptr)
    fail(key + " = \"" + dir + "\": cannot create it in " + p.string() + ": " +
         std::strerror(errno));
  ::rmdir(probe.c_str());
}

// What the fp8 forward GEMMs cannot take: shapes cuBLASLt's fp8 kernels refuse (every inner
// dimension, d_model and the ffn hidden size per tensor-parallel rank, and the rows of a forward
// a multiple of 16). After validate_layout: the rows are a pipeline piece's, this cp rank's.
void check_fp8(const RunConfig& c) {
  if (c.precision.compute != "fp8") return;
  const ParallelConfig& p = c.parallel;
  const int pieces = p.pp > 1 ? p.pipeline.microbatches : 1;
  const long long rows = 1LL * (c.train.micro_batch / pieces) * (c.model.seq_len / p.cp);
  if (c.model.d_model % (16 * p.tp) != 0 || rows % 16 != 0)
    fail("precision.compute = fp8 needs model.d_model / parallel.tp and the rows of a forward, " +
         std::string(pieces > 1 ? "train.micro_batch / parallel.pipeline.microbatches"
                                : "train.micro_batch") +
         " * model.seq_len / parallel.cp, to be multiples of 16 (cuBLASLt's fp8 GEMMs); got " +
         kv("d_model", c.model.d_model) + ", " + kv("tp", p.tp) + ", " + kv("rows", rows));
}

std::string input_file_problem(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return ec.message();  // EACCES, ELOOP, ...
  if (!fs::exists(st)) return "no such file";
  if (fs::is_directory(st)) return "is a directory";
  if (!fs::is_regular_file(st)) return "is not a regular file (a pipe, socket or device)";
  return "";
}

void check_init_from(const ModelConfig& m) {
  if (m.init_from.empty()) return;
  if (const std::string problem = input_file_problem(m.init_from); !problem.empty())
    fail("model.init_from = \"" + m.init_from + "\": " + problem);
}

void check_output_dirs(const RunConfig& cfg) {
  check_output_dir("run.out_dir", cfg.run.out_dir);
  // (every run: a stop signal saves there, whatever the config plans)
  check_output_dir("checkpoint.dir", cfg.checkpoint_dir());
}

void validate(RunConfig& cfg, int world_size) {
  check_fields(cfg);
  check_names(cfg);
  check_device_settings(cfg);
  check_init_from(cfg.model);
  validate_layout(cfg, world_size);
  check_fp8(cfg);
  check_sizes(cfg);
  validate_data_sources(cfg);
}

bool emulated_fp8_for_tests(const RunConfig& cfg) {
  const char* v = std::getenv("TRAINER_TEST_EMULATED_FP8");
  return cfg.hardware.device == "cpu" && v != nullptr && std::string(v) == "1";
}

}  // namespace trainer::config

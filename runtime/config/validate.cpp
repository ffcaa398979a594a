// validate(): per-key values, settings that depend on each other, the grid shape and data.
#include <cstdlib>
#include <filesystem>

#include "runtime/config/field_value.h"
#include "runtime/config/validate_internal.h"

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
}

// What the fp8 forward GEMMs cannot take: shapes cuBLASLt's fp8 kernels refuse (every inner
// dimension, d_model and the ffn hidden size per tensor-parallel rank, and the rows a multiple of
// 16), and a forward rerun (full recompute) that would quantize with moved scales.
void check_fp8(const RunConfig& c) {
  if (c.precision.compute != "fp8") return;
  const long long rows = 1LL * c.train.micro_batch * c.model.seq_len;
  const int tp = c.parallel.tp;  // >= 1 (check_fields)
  if (c.model.d_model % (16 * tp) != 0 || rows % 16 != 0)
    fail(
        "precision.compute = fp8 needs model.d_model / parallel.tp and train.micro_batch * "
        "model.seq_len to be multiples of 16 (cuBLASLt's fp8 GEMMs); got " +
        kv("d_model", c.model.d_model) + ", " + kv("tp", tp) + ", " +
        kv("micro_batch * seq_len", rows));
}

void check_init_from(const ModelConfig& m) {
  std::error_code ec;
  if (!m.init_from.empty() && !std::filesystem::is_regular_file(m.init_from, ec))
    fail("model.init_from = \"" + m.init_from + "\": no such file");
}

}  // namespace

void validate(RunConfig& cfg, int world_size) {
  check_fields(cfg);
  check_names(cfg);
  check_device_settings(cfg);
  check_fp8(cfg);
  check_init_from(cfg.model);
  validate_layout(cfg, world_size);
  validate_data_sources(cfg);
}

bool emulated_fp8_for_tests(const RunConfig& cfg) {
  const char* v = std::getenv("TRAINER_TEST_EMULATED_FP8");
  return cfg.hardware.device == "cpu" && v != nullptr && std::string(v) == "1";
}

}  // namespace trainer::config

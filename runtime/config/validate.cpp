// validate(): per-key values, settings that depend on each other, the grid shape and data.
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
  if (c.precision.compute == "fp8" && device != "cuda")
    fail(
        "precision.compute = fp8 needs hardware.device = cuda (fp8 GEMMs run on sm_90 GPUs only), "
        "but hardware.device = " +
        device + "; use fp32 or bf16 on cpu");
  if (c.distributed.backend == "nccl" && device != "cuda")
    fail("distributed.backend = nccl needs hardware.device = cuda, but hardware.device = " +
         device + "; use gloo or auto");
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
  check_init_from(cfg.model);
  validate_layout(cfg, world_size);
  validate_data_sources(cfg);
}

}  // namespace trainer::config

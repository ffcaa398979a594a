// `trainer ckpt inspect DIR`, `trainer ckpt reshard DIR --to dp=..,zero=.. --out DIR2`,
// `trainer ckpt export DIR --out FILE [--format hf|llmc]`. DIR is a step directory or a
// checkpoint root (its newest complete step).
#include <cstdio>
#include <memory>
#include <string>

#include "app/verbs.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/export.h"
#include "runtime/ckpt/reshard.h"

namespace trainer::app {
namespace {

void inspect(const std::string& path) {
  const std::string dir = ckpt::resolve_step_dir(path);
  const ckpt::Manifest m = ckpt::verify_checkpoint(dir);
  std::printf("checkpoint %s\n", dir.c_str());
  std::printf("step %lld, tokens %lld, adam_step %lld\n", static_cast<long long>(m.step),
              static_cast<long long>(m.tokens), static_cast<long long>(m.adam_step));
  std::printf("grid %s\nconfig_sha256 %s\n", m.grid.describe().c_str(), m.config_sha256.c_str());
  std::printf("loader shard %lld offset %lld epoch %lld\n", static_cast<long long>(m.loader.shard),
              static_cast<long long>(m.loader.offset), static_cast<long long>(m.loader.epoch));
  int64_t params = 0;
  for (const auto& t : m.tensors) {
    int64_t n = 1;
    std::string shape;
    for (auto d : t.global_shape) {
      n *= d;
      shape += (shape.empty() ? "" : "x") + std::to_string(d);
    }
    params += n;
    std::printf("  %-28s %-12s %10lld\n", t.name.c_str(), shape.c_str(), static_cast<long long>(n));
  }
  std::printf("%zu tensors, %lld parameters\n", m.tensors.size(), static_cast<long long>(params));
  for (const auto& s : m.shards)
    std::printf("  %s  %lld bytes  %zu pieces  sha256 %s ok\n", s.file.c_str(),
                static_cast<long long>(s.bytes), s.pieces.size(), s.sha256.c_str());
  std::printf("checksums: all %zu files ok\n", m.shards.size());
}

void export_weights(const std::string& path, const std::string& out, const std::string& format) {
  const std::string dir = ckpt::resolve_step_dir(path);
  ckpt::verify_checkpoint(dir);
  ckpt::CheckpointReader reader(dir);
  const auto w = ckpt::read_weights(reader);
  if (format == "llmc")
    ckpt::write_llmc(out, reader.manifest().model, w);
  else
    ckpt::write_hf_safetensors(out, reader.manifest().model, w);
  std::printf("exported step %lld to %s (%s)\n", static_cast<long long>(reader.manifest().step),
              out.c_str(), format.c_str());
}

}  // namespace

void register_ckpt(CLI::App& app) {
  struct Args {
    std::string dir, to, out, format = "hf";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("ckpt", "Inspect, reshard or export a checkpoint.");
  cmd->require_subcommand(1);

  CLI::App* ins =
      cmd->add_subcommand("inspect", "List step, tokens, grid, tensors; verify checksums.");
  ins->add_option("dir", args->dir, "Step directory or checkpoint root")->required();
  ins->callback([args] { inspect(args->dir); });

  CLI::App* rs = cmd->add_subcommand("reshard", "Rewrite a checkpoint for another grid.");
  rs->add_option("dir", args->dir, "Step directory or checkpoint root")->required();
  rs->add_option("--to", args->to, "Target grid, e.g. dp=4,zero=1")->required();
  rs->add_option("--out", args->out, "Output checkpoint root (gets step_N/)")->required();
  rs->callback([args] {
    const std::string dir = ckpt::resolve_step_dir(args->dir);
    ckpt::verify_checkpoint(dir);
    const std::string out = ckpt::reshard_checkpoint(dir, ckpt::parse_grid(args->to), args->out);
    std::printf("resharded %s -> %s\n", dir.c_str(), out.c_str());
  });

  CLI::App* ex = cmd->add_subcommand("export", "Write the merged weights (HF GPT-2 or llm.c).");
  ex->add_option("dir", args->dir, "Step directory or checkpoint root")->required();
  ex->add_option("--out", args->out, "Output file")->required();
  ex->add_option("--format", args->format, "hf (safetensors, HF GPT-2 names) or llmc")
      ->check(CLI::IsMember({"hf", "llmc"}));
  ex->callback([args] { export_weights(args->dir, args->out, args->format); });
}

}  // namespace trainer::app

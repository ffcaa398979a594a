// `trainer ckpt inspect DIR`, `trainer ckpt reshard DIR --to dp=..,zero=.. --out DIR2`,
// `trainer ckpt export DIR --out FILE [--format hf|llmc]`. DIR is a step directory or a
// checkpoint root (its newest complete step).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "app/verbs.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/export.h"
#include "runtime/ckpt/reshard.h"
#include "runtime/config/run_config.h"
#include "runtime/data/loader.h"
#include "runtime/report/flops.h"
#include "runtime/train/run_dir_lock.h"

namespace trainer::app {
namespace {

namespace fs = std::filesystem;

// The step directory DIR names. Not a checkpoint at all is bad input (exit 2); a checkpoint that
// fails its checks later is a CheckpointError (exit 1).
std::string checkpoint_dir_arg(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw config::ConfigError("ckpt: " + path + ": no such file or directory");
  std::vector<std::string> skipped;
  std::string step_dir;
  try {
    step_dir = ckpt::resolve_step_dir(path, &skipped);
  } catch (const std::exception& e) {
    throw config::ConfigError("ckpt: " + std::string(e.what()));
  }
  for (const std::string& dir : skipped)  // as --resume auto says it
    std::fprintf(stderr,
                 "warning: ckpt: ignoring incomplete write %s (no manifest.json); using %s\n",
                 dir.c_str(), step_dir.c_str());
  return step_dir;
}

// --out of export: a file path whose directory exists (the write goes to a temporary beside it,
// then renames).
void check_output_file(const std::string& out) {
  std::error_code ec;
  if (out.empty()) throw config::ConfigError("ckpt export --out \"\": expected a file path");
  if (fs::is_directory(out, ec))
    throw config::ConfigError("ckpt export --out " + out +
                              ": is a directory; expected a file path");
  const fs::path parent = fs::absolute(out, ec).parent_path();
  if (!fs::is_directory(parent, ec))
    throw config::ConfigError("ckpt export --out " + out + ": the directory " + parent.string() +
                              " does not exist");
}

void inspect(const std::string& path) {
  const std::string dir = checkpoint_dir_arg(path);
  const ckpt::Manifest m = ckpt::verify_checkpoint(dir);
  std::printf("checkpoint %s\n", dir.c_str());
  std::printf("step %lld, tokens %lld, adam_step %lld\n", static_cast<long long>(m.step),
              static_cast<long long>(m.tokens), static_cast<long long>(m.adam_step));
  std::printf("grid %s", m.grid.describe().c_str());
  if (m.world_that_trained() != m.grid.world)  // (rewritten by ckpt reshard)
    std::printf(", resharded from a run of world %d", m.world_that_trained());
  std::printf("\nconfig_sha256 %s\n", m.config_sha256.c_str());
  std::printf("data position %s", data::describe_position(m.loader).c_str());
  if (m.loader_shuffle) {  // recorded since 2026-12-07
    std::printf(", data.shuffle %s, ", *m.loader_shuffle ? "true" : "false");
    if (m.loader_shards.empty())
      std::printf("a synthetic stream");
    else
      std::printf("%zu train shard(s), %s to %s", m.loader_shards.size(),
                  m.loader_shards.front().name.c_str(), m.loader_shards.back().name.c_str());
  }
  std::printf("\n");
  int64_t params = 0;
  for (const auto& t : m.tensors) {
    int64_t n = 1;
    for (auto d : t.global_shape) n *= d;
    params += n;
    std::printf("  %-28s %-12s %10lld\n", t.name.c_str(), ckpt::shape_text(t.global_shape).c_str(),
                static_cast<long long>(n));
  }
  // The model's parameters, as the run reports them: without the vocabulary's padding rows.
  const report::ParamCounts counts = report::count_params(
      report::ModelDims{m.model.vocab, m.model.seq_len, m.model.n_layer, m.model.d_model,
                        m.model.ffn_mult, m.model.num_experts, m.model.moe() ? m.model.top_k : 0});
  std::printf("%zu tensors, %lld parameters", m.tensors.size(),
              static_cast<long long>(counts.total));
  if (params != counts.total)
    std::printf(" (%lld stored: the vocabulary padded from %d to %d rows)",
                static_cast<long long>(params), m.model.vocab, m.model.padded_vocab());
  std::printf("\n");
  for (const auto& s : m.shards)
    std::printf("  %s  %lld bytes  %zu pieces  sha256 %s ok\n", s.file.c_str(),
                static_cast<long long>(s.bytes), s.pieces.size(), s.sha256.c_str());
  std::printf("checksums: all %zu files ok\n", m.shards.size());
}

void export_weights(const std::string& path, const std::string& out, const std::string& format) {
  check_output_file(out);
  const std::string dir = checkpoint_dir_arg(path);
  // Not over a file of a checkpoint (its manifest or a rank's shard): that checkpoint would fail
  // its checksums, or be gone.
  std::error_code ec;
  const fs::path out_parent = fs::absolute(out, ec).parent_path();
  if (fs::exists(out_parent / ckpt::kManifestName, ec))
    throw config::ConfigError("ckpt export --out " + out + ": " + out_parent.string() +
                              " is a checkpoint's step directory; write the export elsewhere");
  if (format == "llmc")  // (bad input: refused before the weights are read)
    if (const std::string problem = ckpt::llmc_export_problem(ckpt::read_manifest(dir).model);
        !problem.empty())
      throw config::ConfigError("ckpt export --format llmc: " + problem);
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
  rs->add_option("--to", args->to,
                 "Target grid, e.g. dp=4,zero=1 or dp=2,tp=2 or dp=2,pp=2,zero=1 or dp=4,ep=2; "
                 "a key left out keeps the checkpoint's value")
      ->required();
  rs->add_option("--out", args->out, "Output checkpoint root (gets step_N/)")->required();
  rs->callback([args] {
    const std::string dir = checkpoint_dir_arg(args->dir);
    // the grid from the manifest alone, before the shards are read and verified
    const ckpt::Manifest source = ckpt::read_manifest(dir);
    const ckpt::Grid grid = ckpt::parse_grid(args->to, source.grid);
    ckpt::check_grid_for_model(source.model, grid);  // before --out is created and locked
    config::check_output_dir("ckpt reshard --out", args->out);
    std::error_code ec;
    const ckpt::Manifest m = ckpt::verify_checkpoint(dir);
    // Never over an existing checkpoint (--out the source's own root would replace the source).
    const std::string target = args->out + "/" + ckpt::step_dir_name(m.step);
    if (fs::exists(target, ec))
      throw config::ConfigError("ckpt reshard --out " + args->out + ": " + target +
                                " exists already; choose another directory");
    // Nor below later checkpoints, as train refuses to start below them: --resume auto there
    // would take the newest (not this one), and a run resumed from this one is a rewind.
    if (const std::vector<std::string> held = ckpt::list_checkpoints(args->out); !held.empty()) {
      const std::string newest = fs::path(held.front()).filename().string();
      if (ckpt::step_of_dir_name(newest) > m.step)
        throw config::ConfigError("ckpt reshard --out " + args->out + ": it holds " + newest +
                                  ", past step " + std::to_string(m.step) +
                                  " of this checkpoint (--resume auto would take that one); "
                                  "choose another directory");
    }
    // A run's checkpoint.dir is the run's: one written into while it trains would be pruned by
    // it, or push its own checkpoints out and be resumed by its requeue. (After the checks: a
    // refused reshard creates nothing.)
    const train::RunDirLock lock("ckpt reshard --out", args->out);
    const std::string out = ckpt::reshard_checkpoint(dir, grid, args->out);
    std::printf("resharded %s (%s) -> %s (%s)\n", dir.c_str(), m.grid.describe().c_str(),
                out.c_str(), grid.describe().c_str());
  });

  CLI::App* ex = cmd->add_subcommand("export", "Write the merged weights (HF GPT-2 or llm.c).");
  ex->add_option("dir", args->dir, "Step directory or checkpoint root")->required();
  ex->add_option("--out", args->out, "Output file")->required();
  ex->add_option("--format", args->format, "hf (safetensors, HF GPT-2 names) or llmc")
      ->check(CLI::IsMember({"hf", "llmc"}))
      ->capture_default_str();
  ex->callback([args] { export_weights(args->dir, args->out, args->format); });
}

}  // namespace trainer::app

// `trainer train RUN.yaml [--set key=value ...] [--resume auto|none|DIR] [--out DIR]`
#include <memory>
#include <string>
#include <vector>

#include "app/verbs.h"
#include "runtime/config/run_config.h"
#include "runtime/train/run.h"

namespace trainer::app {

void register_train(CLI::App& app) {
  struct Args {
    std::string config;
    std::vector<std::string> sets;
    std::string resume = "auto";
    std::string out;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train from a YAML run config (one process of a launch; see `trainer launch`).");
  cmd->add_option("config", args->config,
                  "Run config YAML (configs/tiny.yaml is the embedded default; '-' uses it)")
      ->required();
  cmd->add_option("--set", args->sets,
                  "Override one key, e.g. --set train.lr=1e-3 --set model.n_layer=6 (repeatable)")
      ->take_all();
  cmd->add_option("--resume", args->resume,
                  "auto (the default): newest complete checkpoint in checkpoint.dir if any; none: "
                  "start afresh; or a checkpoint DIR");
  cmd->add_option("--out", args->out, "Output directory (overrides run.out_dir)")
      ->check(CLI::Validator(
          [](const std::string& v) { return v.empty() ? "must not be empty" : std::string(); },
          "DIR"));
  cmd->callback([args] {
    std::vector<std::string> sets = args->sets;
    if (!args->out.empty()) sets.push_back("run.out_dir=" + args->out);
    config::RunConfig cfg = config::load_config_file(args->config, sets);
    train::RunOptions opts;
    opts.resume = args->resume;
    g_exit_code = train::run_training(cfg, opts);
  });
}

}  // namespace trainer::app

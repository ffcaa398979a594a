// `trainer plan RUN.yaml`: checks a config and prints its model size, batch and memory estimate.
#include <cstdio>
#include <memory>
#include <string>

#include "app/verbs.h"
#include "runtime/config/run_config.h"
#include "runtime/report/flops.h"

namespace trainer::app {

void register_plan(CLI::App& app) {
  struct Args {
    std::string config;
    int gpus = 1;
    std::string gpu = "cpu";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("plan",
                                     "Validate a run config for a number of devices and "
                                     "print its size, batch and memory estimate.");
  cmd->add_option("config", args->config, "Run config YAML")->required();
  cmd->add_option("--gpus", args->gpus, "Number of devices (ranks) to plan for")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gpu", args->gpu, "Device kind")
      ->check(CLI::IsMember({"h100", "h200", "a100", "cpu"}));
  cmd->callback([args] {
    config::RunConfig cfg = config::load_config_file(args->config);
    config::validate(cfg, args->gpus);
    const auto& m = cfg.model;
    const report::ModelDims md{m.vocab_size, m.seq_len, m.n_layer, m.d_model, m.ffn_mult};
    const report::ParamCounts pc = report::count_params(md);
    const double psi = static_cast<double>(pc.total);
    const int dp = cfg.parallel.dp;
    const int64_t seqs = static_cast<int64_t>(cfg.train.micro_batch) * cfg.train.grad_accum * dp;
    std::printf("config %s is valid for %d %s device(s)\n", args->config.c_str(), args->gpus,
                args->gpu.c_str());
    std::printf("grid: dp %d x pp %d x cp %d x tp %d (ep %d), zero %d\n", dp, cfg.parallel.pp,
                cfg.parallel.cp, cfg.parallel.tp, cfg.parallel.ep, cfg.parallel.zero);
    std::printf("model: %lld params (%lld non-embedding), %.4g flops/token\n",
                static_cast<long long>(pc.total), static_cast<long long>(pc.non_embedding),
                report::flops_per_token(md));
    std::printf("batch: %lld sequences x %d tokens = %lld tokens/step\n",
                static_cast<long long>(seqs), m.seq_len, static_cast<long long>(seqs * m.seq_len));
    // fp32 everywhere on this build: params 4, grads 4, Adam m+v 8 bytes per parameter.
    std::printf("memory (fp32 params+grads+optimizer, per rank): %.1f MiB\n",
                16.0 * psi / (1024.0 * 1024.0));
  });
}

}  // namespace trainer::app

// trainer launch --nproc-per-node N [--nnodes N --node-rank R --master-addr H --master-port P]
//                RUN.yaml [train args...]
// Runs N local ranks of `trainer train RUN.yaml [train args...]` (this same binary) and watches
// them as a group (runtime/launch/supervisor.h). Everything from RUN.yaml on goes to the ranks
// verbatim, so train options never clash with launch options.
#include <unistd.h>

#include <climits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "app/verbs.h"
#include "runtime/config/run_config.h"
#include "runtime/launch/launch_plan.h"
#include "runtime/launch/supervisor.h"

namespace trainer::app {
namespace {

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, static_cast<size_t>(n));
}

struct LaunchArgs {
  launch::LaunchOptions opts;
  double grace_s = 10;
};

// launch's own options; given after RUN.yaml they would go to every rank's `trainer train`.
constexpr const char* kLaunchOptions[] = {"--nproc-per-node", "--nnodes",      "--node-rank",
                                          "--master-addr",    "--master-port", "--grace-s"};

// Refuses a launch option among the train arguments, naming it and where it goes: CLI11 stops
// reading launch options at RUN.yaml (prefix_command), so `launch RUN.yaml --nproc-per-node 2`
// would say only that --nproc-per-node is required.
void refuse_launch_options_after_config(const std::vector<std::string>& train_args) {
  for (const std::string& arg : train_args)
    for (const std::string name : kLaunchOptions)
      if (arg == name || arg.rfind(name + "=", 0) == 0)
        throw config::ConfigError("trainer launch: " + name +
                                  " is a launch option but comes after RUN.yaml, where the "
                                  "arguments go to `trainer train`; put it before: trainer launch "
                                  "--nproc-per-node N [launch options] RUN.yaml [train args]");
}

int run_launch(CLI::App& cmd, LaunchArgs& args) {
  std::vector<std::string> rest = cmd.remaining();  // RUN.yaml and the train arguments
  if (rest.empty()) throw config::ConfigError("trainer launch: missing RUN.yaml");
  if (rest.front() != "-" && rest.front().rfind("-", 0) == 0)  // ('-': the embedded default)
    throw config::ConfigError("trainer launch: unknown option '" + rest.front() +
                              "' before RUN.yaml (train options go after RUN.yaml)");
  launch::LaunchOptions o = args.opts;
  o.run_yaml = rest.front();
  o.train_args.assign(rest.begin() + 1, rest.end());
  refuse_launch_options_after_config(o.train_args);
  if (cmd.count("--nproc-per-node") == 0)
    throw config::ConfigError("trainer launch: --nproc-per-node N is required (before RUN.yaml)");
  o.exe = self_executable();
  auto children =
      launch::plan_children(o, launch::current_environment(), std::thread::hardware_concurrency());
  if (!(args.grace_s >= 0 && args.grace_s <= 3600))  // also NaN
    throw config::ConfigError("trainer launch: --grace-s " + fmt::format("{}", args.grace_s) +
                              " must be in [0, 3600] seconds");
  launch::SuperviseOptions sup;
  sup.grace_s = args.grace_s;
  return launch::supervise(children, sup, o.node_rank * o.nproc_per_node);
}

}  // namespace

void register_launch(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run N local ranks of `trainer train RUN.yaml [train args]` as one group.");
  // Required, checked in run_launch: there a missing one can be told apart from one misplaced
  // after RUN.yaml.
  cmd->add_option("--nproc-per-node", args->opts.nproc_per_node, "Ranks on this node (required)");
  cmd->add_option("--nnodes", args->opts.nnodes, "Nodes in the job")->capture_default_str();
  cmd->add_option("--node-rank", args->opts.node_rank, "This node's index in [0, nnodes)")
      ->capture_default_str();
  cmd->add_option("--master-addr", args->opts.master_addr,
                  "Rank 0's host (default 127.0.0.1 on one node; required with --nnodes > 1)");
  cmd->add_option("--master-port", args->opts.master_port,
                  "Rendezvous port (default: a free port; required with --nnodes > 1)");
  cmd->add_option("--grace-s", args->grace_s,
                  "Seconds between SIGTERM and SIGKILL after a failure (0 to 3600)")
      ->capture_default_str();
  // The first positional (RUN.yaml) and everything after it are left for the ranks.
  cmd->prefix_command();
  cmd->footer("RUN.yaml [train args...] follow the options and are passed to `trainer train`.");
  cmd->callback([cmd, args] { g_exit_code = run_launch(*cmd, *args); });
}

}  // namespace trainer::app

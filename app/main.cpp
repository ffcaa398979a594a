// trainer: one binary, one verb per file (app/<verb>.cpp).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "app/verbs.h"
#include "runtime/config/did_you_mean.h"
#include "runtime/config/run_config.h"

namespace trainer::app {
int g_exit_code = 0;

namespace {

// CLI11 answers a misspelt verb (`trainer tarin run.yaml`, `trainer ckpt inspekt DIR`) with "A
// subcommand is required": name the word it did not know and the verbs it would have known.
// Walks the verbs as parse does; the parents of verbs take no option with a value.
std::optional<std::string> unknown_verb(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path = "trainer";
  auto verbs_of = [](CLI::App* parent) {
    std::vector<std::string> verbs;
    for (CLI::App* sub : parent->get_subcommands([](CLI::App*) { return true; }))
      verbs.push_back(sub->get_name());
    return verbs;
  };
  bool flags = false;  // (--help and --version answer without a verb)
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    flags = flags || (!word.empty() && word[0] == '-');
    const std::vector<std::string> verbs = verbs_of(at);
    const bool help = word == "-h" || word == "--help" || (at == &app && word == "--version");
    if (!word.empty() && word[0] == '-' && !verbs.empty() && !help)
      return path + ": unknown option '" + word + "' (" + path +
             " takes one of: " + config::join(verbs) + ", and options after it; " + path +
             " --help)";
    if (word.empty() || word[0] == '-') continue;
    if (verbs.empty()) return std::nullopt;  // a verb's own arguments
    CLI::App* next = nullptr;
    for (CLI::App* sub : at->get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == word) next = sub;
    if (next == nullptr) {
      const std::optional<std::string> near = config::closest_match(word, verbs);
      return path + ": unknown verb '" + word + "'" +
             (near ? "; did you mean '" + *near + "'?" : "") + " (" + path +
             " takes one of: " + config::join(verbs) + "; " + path + " --help)";
    }
    at = next;
    path += " " + word;
  }
  if (const std::vector<std::string> verbs = verbs_of(at); !verbs.empty() && !flags)
    return path + " needs a verb: one of " + config::join(verbs) + " (" + path + " --help)";
  return std::nullopt;
}

}  // namespace
}  // namespace trainer::app

int main(int argc, char** argv) {
  using namespace trainer;
  CLI::App app{
      "trainer: distributed LLM training launcher and runtime.\n"
      "Reads one YAML run config, builds the data x pipeline x context x tensor grid, trains,\n"
      "writes sharded checkpoints and a JSON run report."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainer 0.1");
  app::register_train(app);
  app::register_launch(app);
  app::register_plan(app);
  app::register_compare(app);
  app::register_data(app);
  app::register_ckpt(app);
  if (const std::optional<std::string> unknown = app::unknown_verb(app, argc, argv)) {
    std::fprintf(stderr, "error: %s\n", unknown->c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage error is bad input, status 2 as for a bad config.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc& e) {
    std::fprintf(stderr,
                 "error: out of memory: %s (for a training run, `trainer plan RUN.yaml --gpus N` "
                 "gives the memory a layout needs per rank: smaller model sizes or "
                 "train.micro_batch, activation checkpointing, ZeRO or more ranks need less)\n",
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return app::g_exit_code;
}

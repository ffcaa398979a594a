// trainer: one binary, one verb per file (app/<verb>.cpp).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>

#include "app/verbs.h"
#include "runtime/config/run_config.h"

namespace trainer::app {
int g_exit_code = 0;
}

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

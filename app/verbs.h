#pragma once
// Each CLI verb lives in app/<verb>.cpp and registers its subcommand here. A verb's callback
// throws config::ConfigError for bad input (exit status 2) and anything else for failures (1).
#include <CLI/CLI.hpp>

namespace trainer::app {

void register_train(CLI::App& app);
void register_launch(CLI::App& app);
void register_plan(CLI::App& app);
void register_compare(CLI::App& app);
void register_data(CLI::App& app);
void register_ckpt(CLI::App& app);

// Set by a verb callback: the process exit status.
extern int g_exit_code;

}  // namespace trainer::app

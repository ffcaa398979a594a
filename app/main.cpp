// trainer: one binary, one verb per file (app/<verb>.cpp).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  CLI::App app{"trainer: distributed LLM training launcher and runtime"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}

// trainer compare REPORT.json REPORT.json [...]: runs side by side (runtime/report/compare.h).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/verbs.h"
#include "runtime/report/compare.h"

namespace trainer::app {

void register_compare(CLI::App& app) {
  auto paths = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("compare", "Compare run reports side by side.");
  cmd->add_option("reports", *paths,
                  "report.json files, or runs' out_dirs (the first is the ratio baseline)")
      ->required()
      ->expected(1, -1);
  cmd->callback([paths] {
    std::cout << report::compare_reports(report::load_reports(*paths));
    g_exit_code = 0;
  });
}

}  // namespace trainer::app

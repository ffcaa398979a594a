#pragma once
// `trainer compare`: reports side by side, one column per run, numeric rows with a ratio to the
// first report. When the runs saw different token counts, a warning says so and an extra row
// compares loss at the largest token count every curve reaches (linearly interpolated).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace trainer::report {

struct LoadedReport {
  std::string label;  // run.name, made unique with the file name when runs share a name
  std::string path;
  nlohmann::json json;
};

// load_report() each path (ConfigError naming the file on failure) and label the columns.
std::vector<LoadedReport> load_reports(const std::vector<std::string>& paths);

// The table and any warnings, ready to print.
std::string compare_reports(const std::vector<LoadedReport>& reports);

// Loss at `tokens` by linear interpolation in loss.curve; nullopt outside the curve's range.
std::optional<double> loss_at_tokens(const nlohmann::json& report, double tokens);

// The largest token count inside every report's curve range; nullopt when the ranges do not meet.
std::optional<double> largest_common_tokens(const std::vector<LoadedReport>& reports);

// "1.87x": the format of ratio cells (tests build expected cells with it).
std::string format_ratio(double ratio);

}  // namespace trainer::report

#pragma once
// `trainer compare`'s config rows: the keys in which the runs' configs (report.json's "config")
// differ, one row each, beside the rows that already show the layout, precision, data and seed.
#include <string>
#include <vector>

#include "runtime/report/compare.h"

namespace trainer::report {

// Rows of cells (label first, then one cell per report). One row per differing key; when none
// differ, one row saying so. A report without a "config" (older ones) shows "-".
std::vector<std::vector<std::string>> config_rows(const std::vector<LoadedReport>& reports);

}  // namespace trainer::report

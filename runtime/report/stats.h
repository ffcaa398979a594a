#pragma once
// Order statistics over step times.
#include <vector>

namespace trainer::report {

// Linear interpolation between closest ranks (numpy's default): q in [0, 1]. NaN when empty.
double percentile(std::vector<double> values, double q);
double median(std::vector<double> values);

}  // namespace trainer::report

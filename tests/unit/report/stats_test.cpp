// Percentiles, warm-up exclusion and straggler detection.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "runtime/report/report_builder.h"
#include "runtime/report/stats.h"

using namespace trainer::report;

TEST_CASE("percentile_of_1_to_n_is_1_plus_q_times_n_minus_1", "[stats]") {
  // For the values 1..n, linear interpolation between closest ranks gives 1 + q*(n-1).
  std::vector<double> v;
  for (int i = 1; i <= 11; ++i) v.push_back(i);
  std::shuffle(v.begin(), v.end(), std::mt19937(3));
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.95, 1.0}) {
    INFO("q " << q);
    CHECK(percentile(v, q) == Approx(1 + q * 10));
  }
  CHECK(median({4, 1, 3, 2}) == Approx(2.5));
}

TEST_CASE("step_time_stats_exclude_the_warmup_steps", "[stats]") {
  std::vector<double> times = {9, 8, 7};  // slow start-up steps
  std::vector<double> steady;
  for (int i = 0; i < 20; ++i) steady.push_back(0.1 + 0.001 * i);
  times.insert(times.end(), steady.begin(), steady.end());
  const int exclude = warmup_steps_to_exclude(times.size());
  REQUIRE(exclude == 3);
  const StepTimeStats s = step_time_stats(times, exclude);
  CHECK(s.max == Approx(*std::max_element(steady.begin(), steady.end())));
  CHECK(s.p50 == Approx(percentile(steady, 0.5)));
  CHECK(s.p90 == Approx(percentile(steady, 0.9)));
}

TEST_CASE("warmup_exclusion_keeps_at_least_one_step", "[stats]") {
  CHECK(warmup_steps_to_exclude(0) == 0);
  CHECK(warmup_steps_to_exclude(1) == 0);
  CHECK(warmup_steps_to_exclude(2) == 1);
  CHECK(warmup_steps_to_exclude(100) == 3);
}

TEST_CASE("straggler_is_the_rank_with_the_slowest_median", "[stats]") {
  const std::vector<double> base = {5.0, 4.0, 3.0, 0.10, 0.11, 0.09, 0.10, 0.12, 0.10};
  std::vector<std::vector<double>> ranks(4, base);
  for (double& t : ranks[2]) t *= 1.5;
  ranks[1][0] = 50.0;           // a slow warm-up step must not make rank 1 the straggler
  std::vector<double> medians;  // what each rank sends
  for (const auto& times : ranks) medians.push_back(median_step_time(times));
  const StragglerInfo s = find_straggler(medians);
  const std::vector<double> kept(base.begin() + 3, base.end());  // after the 3 warm-up steps
  const double expected = 1.5 * median(kept) / median(kept);     // median of {m, m, 1.5m, m} is m
  REQUIRE(s.slowest_rank);
  REQUIRE(s.slowest_over_median_step_time);
  INFO("slowest " << *s.slowest_rank << " ratio " << *s.slowest_over_median_step_time);
  CHECK(*s.slowest_rank == 2);
  CHECK(*s.slowest_over_median_step_time == Approx(expected));
}

TEST_CASE("single_rank_is_its_own_median", "[stats]") {
  const StragglerInfo s = find_straggler({median_step_time({0.2, 0.3, 0.25})});
  CHECK(s.slowest_rank == 0);
  CHECK(s.slowest_over_median_step_time.value_or(0) == Approx(1.0));
  // a rank that ran no step (a requeue with nothing to train) has no median: no straggler
  CHECK_FALSE(find_straggler({median_step_time({}), 0.2}).slowest_rank);
}

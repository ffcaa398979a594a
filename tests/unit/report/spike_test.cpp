// The online spike detector: quiet on a smooth noisy curve, loud on an injected jump.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "runtime/report/report_builder.h"
#include "runtime/report/spike.h"

using namespace trainer::report;

namespace {
double smooth_loss(int step, std::mt19937& rng) {
  std::normal_distribution<double> noise(0.0, 0.05);
  return 1.5 + 4.0 * std::exp(-step / 60.0) + noise(rng);
}
}  // namespace

TEST_CASE("no_spike_on_a_smooth_decreasing_curve", "[spike]") {
  SpikeDetector det(3.0);
  std::mt19937 rng(1);
  int spikes = 0;
  for (int step = 1; step <= 500; ++step)
    spikes += det.observe(step, smooth_loss(step, rng)) ? 1 : 0;
  CHECK(spikes == 0);
}

TEST_CASE("spike_detected_at_an_injected_jump", "[spike]") {
  SpikeDetector det(3.0);
  std::mt19937 rng(2);
  std::vector<double> history;
  std::optional<LossSpike> found;
  for (int step = 1; step <= 120; ++step) {
    double loss = smooth_loss(step, rng);
    if (step == 100) loss = 5.0 * history.back();
    auto spike = det.observe(step, loss);
    if (spike) {
      REQUIRE_FALSE(found);
      found = spike;
    }
    history.push_back(loss);
  }
  REQUIRE(found);
  CHECK(found->step == 100);
  CHECK(found->loss == Approx(history[99]));
  // ratio = loss / median of the previous 50 losses
  std::vector<double> prev(history.begin() + 49, history.begin() + 99);
  std::sort(prev.begin(), prev.end());
  const double med = (prev[24] + prev[25]) / 2;
  CHECK(found->ratio == Approx(history[99] / med));
}

TEST_CASE("no_spike_before_min_history_and_nonfinite_is_ignored", "[spike]") {
  SpikeDetector det(3.0, 50, 10);
  for (int step = 1; step <= 10; ++step) CHECK_FALSE(det.observe(step, step == 5 ? 100.0 : 1.0));
  CHECK_FALSE(det.observe(11, std::nan("")));  // not a spike, and not part of the median
  CHECK(det.observe(12, 1000.0));
}

// The default watches from the fourth step on (a run diverging at its first steps is reported);
// a resumed job's detector starts from the losses its earlier runs logged.
TEST_CASE("spikes_are_watched_from_the_first_steps_and_across_a_resume", "[spike]") {
  SpikeDetector fresh(3.0);
  for (int step = 1; step <= 3; ++step) CHECK_FALSE(fresh.observe(step, 5.5));
  CHECK(fresh.observe(4, 624.0));

  ReportBuilder resumed(RunReport{}, 3.0, 1);
  EarlierPoints earlier;
  for (int step = 1; step <= 12; ++step) earlier.curve.push_back({step, step * 100, 5.0});
  resumed.set_earlier(earlier);
  StepRecord rec;
  rec.step = 13;
  rec.tokens = 1300;
  rec.loss = 128.0;
  rec.step_time_s = 0.1;
  const std::optional<LossSpike> spike = resumed.record_step(rec);
  REQUIRE(spike);
  CHECK(spike->ratio == Approx(128.0 / 5.0));
  ReportBuilder fresh_builder(RunReport{}, 3.0, 1);  // without the earlier losses: too soon
  CHECK_FALSE(fresh_builder.record_step(rec));

  // Points logged every 10 steps: only the last 50 steps' count (a loss falling from 100 to 5
  // would otherwise keep the median at 50, and hide a jump to 40).
  ReportBuilder sparse(RunReport{}, 3.0, 1);
  EarlierPoints falling;
  for (int step = 10; step <= 1000; step += 10)
    falling.curve.push_back({step, step * 100, step <= 900 ? 100.0 : 5.0});
  sparse.set_earlier(falling);
  rec.step = 1001;
  rec.loss = 40.0;
  CHECK(sparse.record_step(rec));
}

// AlgoTrials: the bookkeeping of the cuda backend's GEMM algorithm trials (TRAINER_GEMM_AUTOTUNE).
#include "runtime/core/algo_trials.h"

#include <catch2/catch.hpp>

#include <vector>

using trainer::AlgoTrials;

namespace {
// Runs calls until settled (or `limit` calls), each timed at ms[candidate] at once.
int run_until_settled(AlgoTrials& trials, const std::vector<double>& ms, int limit = 100) {
  int calls = 0;
  while (!trials.settled() && calls < limit) {
    const int c = trials.next();
    trials.record(c, ms[static_cast<size_t>(c)]);
    ++calls;
  }
  return calls;
}
}  // namespace

TEST_CASE("algo_trials_time_each_candidate_in_turn_then_pick_the_fastest", "[core][algo_trials]") {
  AlgoTrials trials(4, 2, 0.03);
  std::vector<int> order;
  for (int i = 0; i < 8; ++i) {
    REQUIRE_FALSE(trials.settled());
    const int c = trials.next();
    order.push_back(c);
    trials.record(c, std::vector<double>{1.0, 0.9, 0.5, 0.7}[static_cast<size_t>(c)]);
  }
  CHECK(order == std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3});
  REQUIRE(trials.settled());
  CHECK(trials.winner() == 2);
  CHECK(trials.next() == 2);
  CHECK(trials.next() == 2);
  CHECK(trials.winner_ms() == 0.5);
  CHECK(trials.first_ms() == 1.0);
}

TEST_CASE("algo_trials_count_a_candidates_median_and_keep_candidate_0_on_a_small_win",
          "[core][algo_trials]") {
  AlgoTrials trials(2, 3, 0.03);
  // candidate 1: a slow first call (a cold start) and one lucky call do not decide; its median,
  // 0.98, is within 3% of candidate 0's 1.0
  for (const double ms : {1.0, 5.0, 1.0, 0.5, 1.0, 0.98}) trials.record(trials.next(), ms);
  REQUIRE(trials.settled());
  CHECK(trials.winner() == 0);
  CHECK(trials.winner_ms() == 1.0);

  AlgoTrials clear_win(2, 2, 0.03);
  CHECK(run_until_settled(clear_win, {1.0, 0.96}) == 4);
  CHECK(clear_win.winner() == 1);
}

TEST_CASE("algo_trials_take_late_timings_and_rotate_over_the_untimed_candidates",
          "[core][algo_trials]") {
  AlgoTrials trials(3, 1, 0.0);
  const int a = trials.next(), b = trials.next(), c = trials.next();
  CHECK(std::vector<int>{a, b, c} == std::vector<int>{0, 1, 2});
  trials.record(b, 2.0);  // only b's timing has arrived: the next calls skip b
  CHECK(trials.next() == 0);
  CHECK(trials.next() == 2);
  trials.record(a, 3.0);
  trials.record(c, 1.0);
  REQUIRE(trials.settled());
  CHECK(trials.winner() == 2);
  trials.record(0, 0.1);  // after settling, timings change nothing
  CHECK(trials.winner() == 2);
}

TEST_CASE("algo_trials_drop_a_refused_candidate", "[core][algo_trials]") {
  AlgoTrials trials(3, 1, 0.0);
  CHECK(trials.next() == 0);
  trials.drop(0);  // the heuristic's first refused the call: the others shift down
  REQUIRE(trials.candidates() == 2);
  CHECK(run_until_settled(trials, {0.8, 0.4}) == 2);
  CHECK(trials.winner() == 1);
  trials.drop(1);  // the winner refused later: the rest decide again
  REQUIRE(trials.settled());
  CHECK(trials.winner() == 0);
  trials.drop(0);
  CHECK_FALSE(trials.settled());
  CHECK(trials.next() == 0);  // nothing left: the caller sees candidates() == 0
  CHECK(trials.candidates() == 0);
}

TEST_CASE("algo_trials_time_a_lone_candidate_too", "[core][algo_trials]") {
  AlgoTrials one(1, 3);
  CHECK_FALSE(one.settled());
  CHECK(run_until_settled(one, {1.0}) == 3);
  CHECK(one.winner() == 0);
}

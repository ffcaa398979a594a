// report.json's "profile" section and the logged table, from a profiler on a scripted timer.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "runtime/report/profile.h"
#include "runtime/report/run_report.h"
#include "tests/unit/scripted_timer.h"

namespace trainer::report {
namespace {

// Two steps of 10 s each: "gemm" 4 s with 8e12 FLOPs, then "norm" 1 s, per step.
PhaseProfiler two_steps() {
  PhaseProfiler p(
      std::make_unique<testing::ScriptedTimer>(std::vector<double>{0, 1, 5, 5, 6, 10,  //
                                                                   20, 21, 25, 25, 26, 30}));
  for (int step = 0; step < 2; ++step) {
    p.begin_step();
    p.begin("gemm", 8e12);
    p.end();
    p.begin("norm");
    p.end();
    p.end_step();
  }
  return p;
}

TEST_CASE("summarize_profile_gives_per_step_means_longest_first", "[report]") {
  const PhaseProfiler p = two_steps();
  const ProfileInfo info = summarize_profile(p, 4);
  CHECK(info.steps == 2);
  CHECK(info.first_step == 4);
  CHECK(info.step_time_s == Approx(10));
  CHECK(info.unaccounted_s == Approx(5));  // 10 - 4 - 1
  REQUIRE(info.phases.size() == 2);
  CHECK(info.phases[0].name == "gemm");
  CHECK(info.phases[0].calls_per_step == 1);
  CHECK(info.phases[0].time_s == Approx(4));
  CHECK(info.phases[0].share == Approx(0.4));
  CHECK(info.phases[0].tflops == Approx(2.0));  // 16e12 FLOPs in 8 s
  CHECK(info.phases[1].name == "norm");
  CHECK(std::isnan(info.phases[1].tflops));  // not a math phase
}

TEST_CASE("the_profile_section_is_in_report_json_only_when_steps_were_profiled", "[report]") {
  RunReport r;
  CHECK_FALSE(to_json(r).contains("profile"));
  r.profile = summarize_profile(two_steps(), 4);
  const auto j = to_json(r);
  REQUIRE(j.contains("profile"));
  CHECK(j["profile"]["steps"] == 2);
  CHECK(j["profile"]["phases"][0]["name"] == "gemm");
  CHECK(j["profile"]["phases"][0]["tflops"].get<double>() == Approx(2.0));
  CHECK(j["profile"]["phases"][1]["tflops"].is_null());
}

TEST_CASE("profile_table_has_a_header_and_one_line_per_phase", "[report]") {
  const auto lines = profile_table(summarize_profile(two_steps(), 4));
  REQUIRE(lines.size() == 4);
  CHECK_THAT(lines[0], Catch::Contains("2 step(s) from step 4") &&
                           Catch::Contains("10000.000 ms") && Catch::Contains("5000.000 ms"));
  CHECK_THAT(lines[2],
             Catch::Contains("gemm") && Catch::Contains("40.0%") && Catch::Contains("2.00"));
  CHECK_THAT(lines[3], Catch::Contains("norm") && Catch::EndsWith("-"));
}

}  // namespace
}  // namespace trainer::report

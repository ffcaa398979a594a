// PhaseProfiler against a timer whose marks land at scripted times.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/phase_profiler.h"
#include "tests/unit/scripted_timer.h"

namespace trainer {
namespace {

using testing::ScriptedTimer;

PhaseProfiler scripted(std::vector<double> times) {
  return PhaseProfiler(std::make_unique<ScriptedTimer>(std::move(times)));
}

const PhaseProfiler::Totals& find(const PhaseProfiler& p, const std::string& name) {
  for (const auto& t : p.totals())
    if (t.name == name) return t;
  FAIL("no phase " << name);
  throw;
}

TEST_CASE("phase_profiler_sums_each_phase_over_calls_and_steps", "[core]") {
  // step 1: begin 10; a [11, 13); b [13.5, 14); a [15, 16); end 20
  // step 2: begin 100; a [101, 102); end 103
  PhaseProfiler p = scripted({10, 11, 13, 13.5, 14, 15, 16, 20, 100, 101, 102, 103});
  p.begin_step();
  p.begin("a", 5);
  p.end();
  { PhaseProfiler::Scope s(&p, "b", 0); }
  p.begin("a", 7);
  p.end();
  p.end_step();
  p.begin_step();
  p.begin("a", 1);
  p.end();
  p.end_step();

  CHECK(p.steps() == 2);
  CHECK(p.span_seconds() == Approx(10.0 + 3.0));
  REQUIRE(p.totals().size() == 2);
  CHECK(p.totals()[0].name == "a");  // order of first appearance
  const auto& a = find(p, "a");
  CHECK(a.calls == 3);
  CHECK(a.seconds == Approx(2.0 + 1.0 + 1.0));
  CHECK(a.flops == 13);
  const auto& b = find(p, "b");
  CHECK(b.calls == 1);
  CHECK(b.seconds == Approx(0.5));
}

TEST_CASE("phase_profiler_times_nothing_outside_a_step", "[core]") {
  PhaseProfiler p = scripted({0, 1, 2, 3});
  p.begin("outside", 1);  // no step: no mark taken
  p.end();
  { PhaseProfiler::Scope s(nullptr, "null profiler", 1); }
  p.begin_step();  // mark 0
  p.begin("in", 2);
  p.end();
  p.end_step();
  REQUIRE(p.totals().size() == 1);
  CHECK(p.totals()[0].name == "in");
  CHECK(p.totals()[0].seconds == Approx(1.0));
  CHECK(p.span_seconds() == Approx(3.0));
}

TEST_CASE("phase_profiler_refuses_nested_phases_and_unbalanced_steps", "[core]") {
  PhaseProfiler p = scripted({0, 1, 2, 3, 4});
  CHECK_THROWS_AS(p.end_step(), CheckError);
  p.begin_step();
  p.begin("outer");
  CHECK_THROWS_WITH(p.begin("inner"), Catch::Contains("'inner' begun inside phase 'outer'"));
  CHECK_THROWS_WITH(p.end_step(), Catch::Contains("inside phase 'outer'"));
  CHECK_THROWS_AS(p.begin_step(), CheckError);
}

// A timer whose mark number `fail_at` throws, as a cuda event record does after a device fault;
// its wait then reports the fault too.
class FailingTimer : public DeviceTimer {
 public:
  explicit FailingTimer(size_t fail_at) : fail_at_(fail_at) {}
  size_t mark() override {
    if (marks_ == fail_at_) failed_ = true;
    if (failed_) throw std::runtime_error("device fault");
    return marks_++;
  }
  std::vector<double> seconds() override {
    if (failed_) throw std::runtime_error("device fault");
    std::vector<double> s(marks_, 0.0);
    marks_ = 0;
    return s;
  }

 private:
  size_t fail_at_, marks_ = 0;
  bool failed_ = false;
};

TEST_CASE("a_failing_end_mark_drops_the_step_and_end_step_raises_it", "[core]") {
  PhaseProfiler p(std::make_unique<FailingTimer>(2));  // begin_step, begin, then the end mark
  p.begin_step();
  {
    PhaseProfiler::Scope s(&p, "op", 1);  // its destructor must not throw (nor terminate)
  }
  CHECK_FALSE(p.in_step());
  CHECK_THROWS_WITH(p.end_step(), "device fault");
  CHECK(p.steps() == 0);
}

TEST_CASE("host_timer_marks_increase_from_zero", "[core]") {
  auto t = make_host_timer();
  CHECK(t->mark() == 0);
  CHECK(t->mark() == 1);
  const std::vector<double> s = t->seconds();
  REQUIRE(s.size() == 2);
  CHECK(s[0] == 0);
  CHECK(t->seconds().empty());  // cleared
  CHECK(t->mark() == 0);
}

}  // namespace
}  // namespace trainer

#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/optim/lr_schedule.h"

using trainer::optim::learning_rate;

namespace {
trainer::config::TrainConfig schedule(const char* kind) {
  trainer::config::TrainConfig t;
  t.lr = 1.0;
  t.min_lr_ratio = 0.1;
  t.steps = 110;
  t.warmup_steps = 10;
  t.schedule = kind;
  t.decay_fraction = 0.2;
  return t;
}
}  // namespace

TEST_CASE("warmup_is_linear_to_the_peak_lr", "[optim]") {
  for (const char* kind : {"constant", "cosine", "linear", "wsd"}) {
    const auto t = schedule(kind);
    INFO(kind);
    CHECK(learning_rate(t, 0) == Approx(0.1));
    CHECK(learning_rate(t, 4) == Approx(0.5));
    CHECK(learning_rate(t, 9) == Approx(1.0));
  }
}

TEST_CASE("cosine_decays_to_min_lr_through_the_midpoint", "[optim]") {
  const auto t = schedule("cosine");
  CHECK(learning_rate(t, 10) == Approx(1.0));
  CHECK(learning_rate(t, 60) == Approx(0.1 + 0.5 * 0.9));  // halfway: cos(pi/2) = 0
  CHECK(learning_rate(t, 110) == Approx(0.1));
  for (int s = 11; s < 110; ++s) CHECK(learning_rate(t, s) < learning_rate(t, s - 1));
}

TEST_CASE("linear_constant_and_wsd_follow_their_shapes", "[optim]") {
  CHECK(learning_rate(schedule("linear"), 60) == Approx(0.55));
  CHECK(learning_rate(schedule("linear"), 110) == Approx(0.1));
  CHECK(learning_rate(schedule("constant"), 100) == Approx(1.0));
  const auto w = schedule("wsd");  // stable until step 88 (last 20% of 110 decays)
  CHECK(learning_rate(w, 87) == Approx(1.0));
  CHECK(learning_rate(w, 99) == Approx(1.0 - 0.9 * 11.0 / 22.0));
  CHECK(learning_rate(w, 110) == Approx(0.1));
}

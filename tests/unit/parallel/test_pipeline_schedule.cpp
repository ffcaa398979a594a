// Pipeline schedules as data (parallel/pipeline_schedule.h). Every stage's list, carried out
// against the others' with blocking point-to-point semantics (a send completes only when the
// peer has posted the matching receive, as NCCL's and Gloo's rendezvous do; a combined exchange
// posts both sides first), completes for pp 1..8 and 1..12 micro-batches: no schedule
// deadlocks. Each stage runs every micro-batch's forward once and then its backward once, the
// exchanges match across neighbours, and the pieces in flight never exceed micros_in_flight:
// pp - stage under 1F1B, all of them under GPipe.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/parallel/pipeline_schedule.h"

using namespace trainer;
using parallel::PipeAction;
using parallel::PipeSchedule;
using parallel::PipeStep;

namespace {

// One message: which micro-batch, which way (true: an activation forward).
struct Msg {
  int micro;
  bool forward;
  bool operator<(const Msg& o) const {
    return micro != o.micro ? micro < o.micro : forward < o.forward;
  }
};

struct Post {
  int peer;  // stage
  Msg msg;
};

// The sends and receives a step posts on stage s (none with a missing neighbour).
void posts(const PipeStep& st, int s, int pp, std::vector<Post>& sends, std::vector<Post>& recvs) {
  auto add = [&](std::vector<Post>& v, int peer, int micro, bool fwd) {
    if (peer >= 0 && peer < pp) v.push_back({peer, {micro, fwd}});
  };
  switch (st.action) {
    case PipeAction::recv_forward:
      add(recvs, s - 1, st.micro, true);
      break;
    case PipeAction::send_forward:
      add(sends, s + 1, st.micro, true);
      break;
    case PipeAction::send_forward_recv_backward:
      add(sends, s + 1, st.micro, true);
      add(recvs, s + 1, st.other, false);
      break;
    case PipeAction::send_backward:
      add(sends, s - 1, st.micro, false);
      break;
    case PipeAction::send_backward_recv_forward:
      add(sends, s - 1, st.micro, false);
      add(recvs, s - 1, st.other, true);
      break;
    case PipeAction::recv_backward:
      add(recvs, s + 1, st.micro, false);
      break;
    case PipeAction::forward:
    case PipeAction::backward:
      break;
  }
}

// Runs every stage's list in lockstep rounds; returns false on a deadlock (no stage can move).
bool simulate(PipeSchedule schedule, int pp, int micros) {
  std::vector<std::vector<PipeStep>> lists;
  for (int s = 0; s < pp; ++s) lists.push_back(parallel::pipeline_steps(schedule, s, pp, micros));
  std::vector<size_t> at(static_cast<size_t>(pp), 0);
  for (;;) {
    bool all_done = true, moved = false;
    // What each stage has posted at its current step.
    std::vector<std::vector<Post>> sends(static_cast<size_t>(pp)), recvs(static_cast<size_t>(pp));
    for (int s = 0; s < pp; ++s)
      if (at[s] < lists[s].size()) posts(lists[s][at[s]], s, pp, sends[s], recvs[s]);
    for (int s = 0; s < pp; ++s) {
      if (at[s] >= lists[s].size()) continue;
      all_done = false;
      bool ready = true;
      for (const Post& p : sends[s]) {  // the peer must have posted the matching receive
        bool matched = false;
        for (const Post& q : recvs[static_cast<size_t>(p.peer)])
          matched |= q.peer == s && !(q.msg < p.msg) && !(p.msg < q.msg);
        ready &= matched;
      }
      for (const Post& p : recvs[s]) {
        bool matched = false;
        for (const Post& q : sends[static_cast<size_t>(p.peer)])
          matched |= q.peer == s && !(q.msg < p.msg) && !(p.msg < q.msg);
        ready &= matched;
      }
      if (ready) {
        ++at[s];
        moved = true;
      }
    }
    if (all_done) return true;
    if (!moved) return false;
  }
}

}  // namespace

TEST_CASE("pipeline_schedules_complete_without_deadlock_and_bound_the_pieces_in_flight",
          "[parallel][pp]") {
  for (const PipeSchedule schedule : {PipeSchedule::one_f_one_b, PipeSchedule::gpipe})
    for (int pp = 1; pp <= 8; ++pp)
      for (int micros = 1; micros <= 12; ++micros) {
        INFO("schedule " << static_cast<int>(schedule) << ", pp " << pp << ", micros " << micros);
        CHECK(simulate(schedule, pp, micros));
        for (int s = 0; s < pp; ++s) {
          INFO("stage " << s);
          std::vector<int> forwards(static_cast<size_t>(micros)), backwards(forwards);
          int in_flight = 0, most = 0;
          for (const PipeStep& st : parallel::pipeline_steps(schedule, s, pp, micros)) {
            if (st.action == PipeAction::forward) {
              CHECK(backwards[st.micro] == 0);
              ++forwards[st.micro];
              most = std::max(most, ++in_flight);
            }
            if (st.action == PipeAction::backward) {
              CHECK(forwards[st.micro] == 1);
              ++backwards[st.micro];
              --in_flight;
            }
          }
          CHECK(forwards == std::vector<int>(static_cast<size_t>(micros), 1));
          CHECK(backwards == forwards);
          CHECK(most == parallel::micros_in_flight(schedule, s, pp, micros));
        }
      }
}

TEST_CASE("one_f_one_b_follows_megatrons_order", "[parallel][pp]") {
  // Stage 0 of 2, 3 micro-batches: one warm-up forward, then one forward and one backward in
  // turn, then the last backward.
  using A = PipeAction;
  const std::vector<PipeStep> want = {{A::recv_forward, 0},  {A::forward, 0},
                                      {A::send_forward, 0},  {A::recv_forward, 1},
                                      {A::forward, 1},       {A::send_forward_recv_backward, 1, 0},
                                      {A::backward, 0},      {A::send_backward_recv_forward, 0, 2},
                                      {A::forward, 2},       {A::send_forward_recv_backward, 2, 1},
                                      {A::backward, 1},      {A::send_backward, 1},
                                      {A::recv_backward, 2}, {A::backward, 2},
                                      {A::send_backward, 2}};
  CHECK(parallel::pipeline_steps(PipeSchedule::one_f_one_b, 0, 2, 3) == want);
  CHECK(parallel::bubble_fraction(4, 8) == Approx(3.0 / 11.0));
}

TEST_CASE("pipeline_schedule_names_are_checked", "[parallel][pp]") {
  CHECK(parallel::parse_pipe_schedule("1f1b") == PipeSchedule::one_f_one_b);
  CHECK(parallel::parse_pipe_schedule("gpipe") == PipeSchedule::gpipe);
  CHECK_THROWS_WITH(parallel::parse_pipe_schedule("interleaved"), Catch::Contains("not built yet"));
  CHECK_THROWS_AS(parallel::parse_pipe_schedule("zb"), config::ConfigError);
}

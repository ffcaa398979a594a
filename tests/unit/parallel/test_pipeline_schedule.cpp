// Pipeline schedules as data (parallel/pipeline_schedule.h). Every stage's list, carried out
// against the others' with blocking point-to-point semantics (a transfer completes only when the
// peer has posted the matching one, as NCCL's and Gloo's rendezvous do; an exchange posts all of
// its transfers first, then waits for each), completes: no schedule deadlocks. Transfers match in
// the order posted, per pair of stages and tag (Gloo) or per pair of stages alone (NCCL, which
// has no tags); both ways, every receive gets the message it names. Each stage runs every piece's
// forward once after its input arrived, then its backward once after its output gradient
// arrived; activation_slots gives every piece in flight a slot of its own (the head chunk's
// among the head slots), no more slots than pieces in flight at once: pp - stage under 1F1B,
// all of them under GPipe.
#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/parallel/pipeline_schedule.h"

using namespace trainer;
using parallel::PipeAction;
using parallel::PipePiece;
using parallel::PipeSchedule;
using parallel::PipeStep;

namespace {

// One message: a piece's activation (forward) or gradient from virtual stage `from`.
struct Msg {
  int micro, from;
  bool forward;
  auto key() const { return std::make_tuple(micro, from, forward); }
  bool operator==(const Msg& o) const { return key() == o.key(); }
};

struct Transfer {
  bool send;
  int peer;  // stage
  Msg msg;   // what a send carries, or what a receive expects
  bool done = false;
};

// The transfers an exchange posts on stage s of pp (virtual stage of stage s chunk c: c*pp + s).
std::vector<Transfer> transfers_of(const PipeStep& st, int s, int pp) {
  const int next = (s + 1) % pp, prev = (s + pp - 1) % pp;
  std::vector<Transfer> out;
  auto vs = [&](const PipePiece& p) { return p.chunk * pp + s; };
  if (st.send_forward.some())
    out.push_back({true, next, {st.send_forward.micro, vs(st.send_forward), true}});
  if (st.send_backward.some())
    out.push_back({true, prev, {st.send_backward.micro, vs(st.send_backward), false}});
  if (st.recv_forward.some())
    out.push_back({false, prev, {st.recv_forward.micro, vs(st.recv_forward) - 1, true}});
  if (st.recv_backward.some())
    out.push_back({false, next, {st.recv_backward.micro, vs(st.recv_backward) + 1, false}});
  return out;
}

// Carries out every stage's list; returns "" or what went wrong (a deadlock, a receive matched
// with another message than it names). tagged: forward and backward match separately (Gloo's
// tags); untagged: all transfers between two stages match in one order (NCCL).
std::string simulate(const std::vector<std::vector<PipeStep>>& lists, bool tagged) {
  const int pp = static_cast<int>(lists.size());
  // Posted, not yet matched, per channel (from, to, kind): sends and receives in posting order.
  using Channel = std::tuple<int, int, int>;
  std::map<Channel, std::deque<Transfer*>> sends, recvs;
  std::vector<size_t> at(static_cast<size_t>(pp), 0);
  std::vector<std::vector<Transfer>> posted(static_cast<size_t>(pp));
  std::vector<bool> in_exchange(static_cast<size_t>(pp), false);
  for (;;) {
    bool all_done = true, moved = false;
    for (int s = 0; s < pp; ++s) {
      const std::vector<PipeStep>& list = lists[static_cast<size_t>(s)];
      size_t& i = at[static_cast<size_t>(s)];
      if (i >= list.size()) continue;
      all_done = false;
      const PipeStep& st = list[i];
      if (st.action != PipeAction::exchange) {
        ++i;
        moved = true;
        continue;
      }
      std::vector<Transfer>& mine = posted[static_cast<size_t>(s)];
      if (!in_exchange[static_cast<size_t>(s)]) {  // post them all
        mine = transfers_of(st, s, pp);
        if (mine.empty()) return "stage " + std::to_string(s) + ": an empty exchange";
        for (Transfer& t : mine) {
          const int kind = tagged ? (t.msg.forward ? 1 : 2) : 0;
          if (t.send)
            sends[{s, t.peer, kind}].push_back(&t);
          else
            recvs[{t.peer, s, kind}].push_back(&t);
        }
        in_exchange[static_cast<size_t>(s)] = true;
        moved = true;
      }
      // match every channel's heads
      for (auto& [ch, q] : sends) {
        auto& r = recvs[ch];
        while (!q.empty() && !r.empty()) {
          if (!(q.front()->msg == r.front()->msg))
            return "stage " + std::to_string(std::get<1>(ch)) + " receives micro " +
                   std::to_string(r.front()->msg.micro) + " from virtual stage " +
                   std::to_string(r.front()->msg.from) + " but gets micro " +
                   std::to_string(q.front()->msg.micro) + " from " +
                   std::to_string(q.front()->msg.from);
          q.front()->done = r.front()->done = true;
          q.pop_front();
          r.pop_front();
          moved = true;
        }
      }
      bool done = true;
      for (const Transfer& t : mine) done &= t.done;
      if (done) {
        in_exchange[static_cast<size_t>(s)] = false;
        ++i;
        moved = true;
      }
    }
    if (all_done) return "";
    if (!moved) return "deadlock";
  }
}

std::vector<std::vector<PipeStep>> all_stages(PipeSchedule schedule, int pp, int micros, int v) {
  std::vector<std::vector<PipeStep>> lists;
  for (int s = 0; s < pp; ++s)
    lists.push_back(parallel::pipeline_steps(schedule, s, pp, micros, v));
  return lists;
}

// Every piece of every chunk: forward once after its input arrived (or at the first virtual
// stage), its output sent after its forward, its backward once after its forward and its output
// gradient (or at the last virtual stage), its input gradient sent after that; each piece in
// flight holds a slot no other piece in flight holds, of its pool (head or plain), and each
// pool has as many slots as it has pieces in flight at most. Returns the most pieces in flight
// at once over all chunks.
int check_stage_order(const std::vector<PipeStep>& steps, int s, int pp, int micros, int v) {
  std::set<std::pair<int, int>> got_input, forwarded, got_grad, backwarded;
  int live_all = 0, most_all = 0;
  const int head_chunk = parallel::head_chunk_of(s, pp, v);
  int live_pool[2] = {0, 0}, most_pool[2] = {0, 0};  // the other chunks', the head chunk's
  const parallel::PipeSlots slots = parallel::activation_slots(steps, head_chunk, micros, v);
  REQUIRE(slots.slot_of.size() == static_cast<size_t>(micros * v));
  std::vector<int> holder(static_cast<size_t>(slots.plain + slots.head), -1);  // a slot's piece
  std::set<std::pair<int, int>> started;
  auto slot_of = [&](const PipePiece& p) {
    return slots.slot_of[static_cast<size_t>(p.chunk * micros + p.micro)];
  };
  auto start = [&](const PipePiece& p) {
    if (!started.insert({p.micro, p.chunk}).second) return;
    most_all = std::max(most_all, ++live_all);
    const int k = p.chunk == head_chunk ? 1 : 0;
    most_pool[k] = std::max(most_pool[k], ++live_pool[k]);
    // its slot: of its pool, and free
    const int slot = slot_of(p);
    CHECK((k == 1 ? slot >= slots.plain && slot < slots.plain + slots.head
                  : slot >= 0 && slot < slots.plain));
    if (slot < 0 || slot >= static_cast<int>(holder.size())) return;
    CHECK(holder[static_cast<size_t>(slot)] == -1);
    holder[static_cast<size_t>(slot)] = p.chunk * micros + p.micro;
  };
  for (const PipeStep& st : steps) {
    const std::pair<int, int> key{st.piece.micro, st.piece.chunk};
    const bool first_virtual = s == 0 && st.piece.chunk == 0;
    const bool last_virtual = s == pp - 1 && st.piece.chunk == v - 1;
    switch (st.action) {
      case PipeAction::forward:
        CHECK((first_virtual || got_input.count(key) == 1));
        CHECK(forwarded.insert(key).second);
        start(st.piece);
        break;
      case PipeAction::backward:
        CHECK(forwarded.count(key) == 1);
        CHECK((last_virtual || got_grad.count(key) == 1));
        CHECK(backwarded.insert(key).second);
        --live_all;
        --live_pool[st.piece.chunk == head_chunk ? 1 : 0];
        if (const int slot = slot_of(st.piece); slot >= 0 && slot < int(holder.size()))
          holder[static_cast<size_t>(slot)] = -1;
        break;
      case PipeAction::exchange:
        if (st.send_forward.some())
          CHECK(forwarded.count({st.send_forward.micro, st.send_forward.chunk}) == 1);
        if (st.send_backward.some())
          CHECK(backwarded.count({st.send_backward.micro, st.send_backward.chunk}) == 1);
        if (st.recv_forward.some()) {
          CHECK(got_input.insert({st.recv_forward.micro, st.recv_forward.chunk}).second);
          start(st.recv_forward);
        }
        if (st.recv_backward.some())
          CHECK(got_grad.insert({st.recv_backward.micro, st.recv_backward.chunk}).second);
        break;
    }
  }
  CHECK(forwarded.size() == static_cast<size_t>(micros * v));
  CHECK(backwarded.size() == forwarded.size());
  CHECK(slots.plain == most_pool[0]);
  CHECK(slots.head == most_pool[1]);
  if (s < pp - 1) CHECK(slots.plain == most_all);  // one pool: exactly the pieces at once
  return most_all;
}

}  // namespace

TEST_CASE("pipeline_schedules_complete_without_deadlock_and_bound_the_pieces_in_flight",
          "[parallel][pp]") {
  for (const PipeSchedule schedule : {PipeSchedule::one_f_one_b, PipeSchedule::gpipe})
    for (int pp = 1; pp <= 8; ++pp)
      for (int micros = 1; micros <= 12; ++micros) {
        INFO("schedule " << static_cast<int>(schedule) << ", pp " << pp << ", micros " << micros);
        const auto lists = all_stages(schedule, pp, micros, 1);
        CHECK(simulate(lists, true) == "");
        CHECK(simulate(lists, false) == "");
        for (int s = 0; s < pp; ++s) {
          INFO("stage " << s);
          CHECK(check_stage_order(lists[static_cast<size_t>(s)], s, pp, micros, 1) ==
                parallel::micros_in_flight(schedule, s, pp, micros));
        }
      }
}

TEST_CASE("interleaved_schedule_completes_and_every_receive_gets_its_message", "[parallel][pp]") {
  for (int pp = 2; pp <= 6; ++pp)
    for (int v = 2; v <= 4; ++v)
      for (int micros = pp; micros <= 3 * pp; micros += pp) {
        INFO("pp " << pp << ", virtual stages " << v << ", micros " << micros);
        const auto lists = all_stages(PipeSchedule::interleaved, pp, micros, v);
        CHECK(simulate(lists, true) == "");
        CHECK(simulate(lists, false) == "");
        for (int s = 0; s < pp; ++s) {
          INFO("stage " << s);
          // Megatron's bound: a stage keeps at most its warm-up pieces ((pp - s - 1) * 2 +
          // (v - 1) * pp) and the first steady one, and never more than all of them (micros ==
          // pp: all are warm-up).
          const int all = micros * v;
          CHECK(check_stage_order(lists[static_cast<size_t>(s)], s, pp, micros, v) <=
                (micros == pp ? all : std::min((pp - s - 1) * 2 + (v - 1) * pp + 1, all)));
        }
      }
  CHECK_THROWS(parallel::pipeline_steps(PipeSchedule::interleaved, 0, 2, 3, 2));  // 3 % pp
  CHECK_THROWS(parallel::pipeline_steps(PipeSchedule::interleaved, 0, 1, 4, 2));  // pp 1
  CHECK_THROWS(parallel::pipeline_steps(PipeSchedule::one_f_one_b, 0, 2, 4, 2));
}

TEST_CASE("one_f_one_b_follows_megatrons_order", "[parallel][pp]") {
  // Stage 0 of 2, 3 micro-batches: one warm-up forward, then one forward and one backward in
  // turn, then the last backward. (Stage 0 receives no input and sends no input gradient.)
  const PipePiece none;
  auto x = [&](PipePiece sf, PipePiece sb, PipePiece rf, PipePiece rb) {
    return PipeStep{PipeAction::exchange, none, sf, sb, rf, rb};
  };
  const std::vector<PipeStep> want = {PipeStep::fwd(0),         x({0}, none, none, none),
                                      PipeStep::fwd(1),         x({1}, none, none, {0}),
                                      PipeStep::bwd(0),         PipeStep::fwd(2),
                                      x({2}, none, none, {1}),  PipeStep::bwd(1),
                                      x(none, none, none, {2}), PipeStep::bwd(2)};
  CHECK(parallel::pipeline_steps(PipeSchedule::one_f_one_b, 0, 2, 3) == want);
  CHECK(parallel::bubble_fraction(4, 8) == Approx(3.0 / 11.0));
}

TEST_CASE("interleaved_follows_megatrons_order", "[parallel][pp]") {
  // Stage 0 of 2, 2 chunks, 4 micro-batches, traced by hand through Megatron's
  // forward_backward_pipelining_with_interleaving: 4 warm-up forwards ((pp - 1) * 2 + (v - 1) *
  // pp), chunk 0 of micro-batches 0 and 1, then chunk 1 of them (their inputs back round the
  // ring from stage 1); 4 steady pairs; 4 cool-down backwards, chunk 1's before chunk 0's.
  const PipePiece none;
  auto x = [&](PipePiece sf, PipePiece sb, PipePiece rf, PipePiece rb) {
    return PipeStep{PipeAction::exchange, none, sf, sb, rf, rb};
  };
  using S = PipeStep;
  const std::vector<PipeStep> want = {S::fwd(0, 0),
                                      x({0, 0}, none, none, none),
                                      S::fwd(1, 0),
                                      x({1, 0}, none, {0, 1}, none),
                                      S::fwd(0, 1),
                                      x({0, 1}, none, {1, 1}, none),
                                      S::fwd(1, 1),
                                      x({1, 1}, none, none, {0, 1}),
                                      S::fwd(2, 0),
                                      S::bwd(0, 1),
                                      x({2, 0}, {0, 1}, none, {1, 1}),
                                      S::fwd(3, 0),
                                      S::bwd(1, 1),
                                      x({3, 0}, {1, 1}, {2, 1}, {0, 0}),
                                      S::fwd(2, 1),
                                      S::bwd(0, 0),
                                      x({2, 1}, none, {3, 1}, {1, 0}),
                                      S::fwd(3, 1),
                                      S::bwd(1, 0),
                                      x({3, 1}, none, none, {2, 1}),
                                      S::bwd(2, 1),
                                      x(none, {2, 1}, none, {3, 1}),
                                      S::bwd(3, 1),
                                      x(none, {3, 1}, none, {2, 0}),
                                      S::bwd(2, 0),
                                      x(none, none, none, {3, 0}),
                                      S::bwd(3, 0)};
  CHECK(parallel::pipeline_steps(PipeSchedule::interleaved, 0, 2, 4, 2) == want);
  CHECK(parallel::bubble_fraction(4, 8, 2) == Approx(3.0 / 19.0));
}

TEST_CASE("pipeline_schedule_names_are_checked", "[parallel][pp]") {
  CHECK(parallel::parse_pipe_schedule("1f1b") == PipeSchedule::one_f_one_b);
  CHECK(parallel::parse_pipe_schedule("gpipe") == PipeSchedule::gpipe);
  CHECK(parallel::parse_pipe_schedule("interleaved") == PipeSchedule::interleaved);
  CHECK_THROWS_AS(parallel::parse_pipe_schedule("zb"), config::ConfigError);
}

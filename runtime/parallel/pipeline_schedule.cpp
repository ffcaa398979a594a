#include "runtime/parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "runtime/config/run_config.h"
#include "runtime/core/check.h"

namespace trainer::parallel {

namespace {

// Builds a stage's list: each piece's sends and receives at the ends of the pipeline (the first
// virtual stage's input, the last one's output gradient) are left out.
class StepList {
 public:
  StepList(int stage, int stages, int chunks) : stage_(stage), stages_(stages), chunks_(chunks) {}
  bool first_virtual(const PipePiece& p) const { return stage_ == 0 && p.chunk == 0; }
  bool last_virtual(const PipePiece& p) const {
    return stage_ == stages_ - 1 && p.chunk == chunks_ - 1;
  }
  void forward(PipePiece p) { steps_.push_back(PipeStep::run(PipeAction::forward, p)); }
  void backward(PipePiece p) { steps_.push_back(PipeStep::run(PipeAction::backward, p)); }
  // An exchange of whichever of the four are some and not at an end.
  void exchange(PipePiece send_fwd, PipePiece send_bwd, PipePiece recv_fwd, PipePiece recv_bwd) {
    PipeStep x;
    if (send_fwd.some() && !last_virtual(send_fwd)) x.send_forward = send_fwd;
    if (send_bwd.some() && !first_virtual(send_bwd)) x.send_backward = send_bwd;
    if (recv_fwd.some() && !first_virtual(recv_fwd)) x.recv_forward = recv_fwd;
    if (recv_bwd.some() && !last_virtual(recv_bwd)) x.recv_backward = recv_bwd;
    if (x.send_forward.some() || x.send_backward.some() || x.recv_forward.some() ||
        x.recv_backward.some())
      steps_.push_back(x);
  }
  std::vector<PipeStep> take() { return std::move(steps_); }

 private:
  int stage_, stages_, chunks_;
  std::vector<PipeStep> steps_;
};

std::vector<PipeStep> gpipe_steps(int stage, int stages, int micros) {
  StepList l(stage, stages, 1);
  const PipePiece none;
  for (int m = 0; m < micros; ++m) {
    l.exchange(none, none, {m}, none);
    l.forward({m});
    l.exchange({m}, none, none, none);
  }
  for (int m = 0; m < micros; ++m) {
    l.exchange(none, none, none, {m});
    l.backward({m});
    l.exchange(none, {m}, none, none);
  }
  return l.take();
}

// Megatron's forward_backward_pipelining_without_interleaving, step for step.
std::vector<PipeStep> one_f_one_b_steps(int stage, int stages, int micros) {
  StepList l(stage, stages, 1);
  const PipePiece none;
  const int warmup = std::min(stages - stage - 1, micros), steady = micros - warmup;
  int f = 0, b = 0;  // the next micro-batch to run forward, backward
  for (int i = 0; i < warmup; ++i, ++f) {
    l.exchange(none, none, {f}, none);
    l.forward({f});
    l.exchange({f}, none, none, none);
  }
  if (steady > 0) l.exchange(none, none, {f}, none);
  for (int i = 0; i < steady; ++i, ++b) {
    l.forward({f});
    l.exchange({f}, none, none, {b});
    ++f;
    l.backward({b});
    l.exchange(none, {b}, i == steady - 1 ? none : PipePiece{f}, none);
  }
  for (int i = 0; i < warmup; ++i, ++b) {
    l.exchange(none, none, none, {b});
    l.backward({b});
    l.exchange(none, {b}, none, none);
  }
  return l.take();
}

// Megatron's forward_backward_pipelining_with_interleaving, step for step: the k-th forward (of
// micros * chunks) runs chunk (k mod pp·v) / pp of micro-batch (k / pp·v)·pp + k mod pp; the k-th
// backward the same micro-batch in chunk v - 1 - that. A receive names only its chunk here (as
// Megatron appends to a chunk's queue); resolve_receives gives it its micro-batch.
std::vector<PipeStep> interleaved_steps(int stage, int stages, int micros, int chunks) {
  const int pp = stages, v = chunks, total = micros * v, group = pp * v;
  // (the chunk of a k below 0 is taken modulo, as Python's % does in Megatron's code)
  auto chunk_of = [&](int k) { return (k % group + group) % group / pp; };
  auto fwd = [&](int k) { return PipePiece{k / group * pp + k % pp, chunk_of(k)}; };
  auto bwd = [&](int k) { return PipePiece{k / group * pp + k % pp, v - 1 - chunk_of(k)}; };
  // a receive into chunk c, its micro-batch to be resolved (0 for now)
  auto into = [](int chunk) { return PipePiece{0, chunk}; };
  const PipePiece none;
  const bool all_warmup = micros == pp;
  const int warmup = all_warmup ? total : std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
  const int steady = total - warmup;
  const bool first = stage == 0, last = stage == pp - 1;

  StepList l(stage, stages, chunks);
  l.exchange(none, none, into(0), none);
  for (int k = 0; k < warmup; ++k) {
    l.forward(fwd(k));
    const int next_chunk = k + 1 < total ? fwd(k + 1).chunk : 0;
    const bool recv_prev = !(first && next_chunk == 0) && k != total - 1;
    const bool recv_next = k == warmup - 1 && !all_warmup && !last;
    l.exchange(fwd(k), none, recv_prev ? into(next_chunk) : none, recv_next ? into(v - 1) : none);
  }
  for (int k = 0; k < steady; ++k) {
    const int fk = k + warmup;
    l.forward(fwd(fk));
    l.backward(bwd(k));
    bool recv_prev = true;
    int next_fwd_chunk;
    if (first) {  // stage 0's next input comes round the ring from the last stage
      next_fwd_chunk = fwd(fk - (pp - 1)).chunk;
      if (next_fwd_chunk == v - 1) recv_prev = false;
      ++next_fwd_chunk;
    } else {
      next_fwd_chunk = fwd(fk + 1).chunk;
    }
    bool recv_next = true;
    int next_bwd_chunk;
    if (last) {  // and the last stage's next output gradient from stage 0
      next_bwd_chunk = bwd(k - (pp - 1)).chunk;
      if (next_bwd_chunk == 0) recv_next = false;
      --next_bwd_chunk;
    } else {
      next_bwd_chunk = bwd(k + 1).chunk;
    }
    if (k == steady - 1) recv_prev = false;
    l.exchange(fwd(fk), bwd(k), recv_prev ? into(next_fwd_chunk) : none,
               recv_next ? into(next_bwd_chunk) : none);
  }
  if (all_warmup) l.exchange(none, none, none, into(v - 1));
  for (int k = steady; k < total; ++k) {
    l.backward(bwd(k));
    const int next_chunk = k + 1 < total ? bwd(k + 1).chunk : 0;
    const bool recv_next = !(last && next_chunk == v - 1) && k != total - 1;
    l.exchange(none, bwd(k), none, recv_next ? into(next_chunk) : none);
  }
  return l.take();
}

// Gives each receive its micro-batch: a chunk's receives feed its forwards (or backwards) in
// their order, as Megatron's per-chunk queues do.
void resolve_receives(std::vector<PipeStep>& steps, int chunks) {
  std::vector<std::deque<int>> forwards(static_cast<size_t>(chunks)), backwards(forwards);
  for (const PipeStep& st : steps) {
    if (st.action == PipeAction::forward)
      forwards[static_cast<size_t>(st.piece.chunk)].push_back(st.piece.micro);
    if (st.action == PipeAction::backward)
      backwards[static_cast<size_t>(st.piece.chunk)].push_back(st.piece.micro);
  }
  // the pieces that take no receive: stage 0's first chunk forwards, the last one's backwards
  auto take = [](std::deque<int>& q, PipePiece& p) {
    TRAINER_CHECK(!q.empty(),
                  "pipeline schedule: a receive into chunk " << p.chunk << " that nothing reads");
    p.micro = q.front();
    q.pop_front();
  };
  for (PipeStep& st : steps) {
    if (st.action != PipeAction::exchange) continue;
    if (st.recv_forward.some())
      take(forwards[static_cast<size_t>(st.recv_forward.chunk)], st.recv_forward);
    if (st.recv_backward.some())
      take(backwards[static_cast<size_t>(st.recv_backward.chunk)], st.recv_backward);
  }
}

}  // namespace

PipeSchedule parse_pipe_schedule(const std::string& name) {
  if (name == "1f1b") return PipeSchedule::one_f_one_b;
  if (name == "gpipe") return PipeSchedule::gpipe;
  if (name == "interleaved") return PipeSchedule::interleaved;
  throw config::ConfigError("parallel.pipeline.schedule = '" + name +
                            "': allowed are 1f1b, gpipe, interleaved");
}

std::vector<PipeStep> pipeline_steps(PipeSchedule schedule, int stage, int stages, int micros,
                                     int virtual_stages) {
  TRAINER_CHECK(stages >= 1 && stage >= 0 && stage < stages && micros >= 1 && virtual_stages >= 1,
                "pipeline stage " << stage << " of " << stages << ", " << micros << " micros, "
                                  << virtual_stages << " virtual stages");
  switch (schedule) {
    case PipeSchedule::gpipe:
    case PipeSchedule::one_f_one_b:
      TRAINER_CHECK(virtual_stages == 1, "virtual stages need the interleaved schedule");
      return schedule == PipeSchedule::gpipe ? gpipe_steps(stage, stages, micros)
                                             : one_f_one_b_steps(stage, stages, micros);
    case PipeSchedule::interleaved: {
      // (config::validate names the keys: parallel.pp, virtual_stages, microbatches)
      TRAINER_CHECK(stages > 1 && virtual_stages > 1 && micros % stages == 0,
                    "the interleaved schedule needs pp > 1, virtual stages > 1 and micro-batches a "
                    "multiple of pp; got pp "
                        << stages << ", " << virtual_stages << " virtual stages, " << micros
                        << " micro-batches");
      std::vector<PipeStep> steps = interleaved_steps(stage, stages, micros, virtual_stages);
      resolve_receives(steps, virtual_stages);
      return steps;
    }
  }
  return {};
}

PipeSlots activation_slots(const std::vector<PipeStep>& steps, int head_chunk, int micros,
                           int chunks) {
  PipeSlots out;
  out.slot_of.assign(static_cast<size_t>(chunks * micros), -1);
  int made[2] = {0, 0};      // slots of each pool so far: plain, head
  std::vector<int> free[2];  // each pool's freed slots
  auto pool = [&](const PipePiece& p) { return p.chunk == head_chunk ? 1 : 0; };
  auto slot = [&](const PipePiece& p) -> int& {
    return out.slot_of[static_cast<size_t>(p.chunk * micros + p.micro)];
  };
  auto start = [&](const PipePiece& p) {
    if (slot(p) >= 0) return;
    std::vector<int>& f = free[pool(p)];
    if (f.empty()) {  // every slot of the pool is busy: one more
      slot(p) = made[pool(p)]++;
      return;
    }
    slot(p) = f.back();
    f.pop_back();
  };
  for (const PipeStep& st : steps) {
    if (st.action == PipeAction::exchange && st.recv_forward.some()) start(st.recv_forward);
    if (st.action == PipeAction::forward) start(st.piece);
    if (st.action == PipeAction::backward) free[pool(st.piece)].push_back(slot(st.piece));
  }
  out.plain = made[0];
  out.head = made[1];
  if (head_chunk >= 0)  // the head's slots after the plain ones
    for (int m = 0; m < micros; ++m) slot({m, head_chunk}) += out.plain;
  return out;
}

int head_chunk_of(int stage, int stages, int virtual_stages) {
  return stage == stages - 1 ? virtual_stages - 1 : -1;
}

int micros_in_flight(PipeSchedule schedule, int stage, int stages, int micros, int virtual_stages) {
  if (schedule == PipeSchedule::gpipe) return micros;
  if (schedule == PipeSchedule::one_f_one_b) return std::min(stages - stage, micros);
  const PipeSlots s =
      activation_slots(pipeline_steps(schedule, stage, stages, micros, virtual_stages),
                       head_chunk_of(stage, stages, virtual_stages), micros, virtual_stages);
  return s.plain + s.head;
}

double bubble_fraction(int stages, int micros, int virtual_stages) {
  const double idle = static_cast<double>(stages - 1);
  return idle / (static_cast<double>(virtual_stages) * micros + idle);
}

}  // namespace trainer::parallel

#pragma once
// Pipeline schedules as data: the order in which one stage runs the forward and backward passes
// of the micro-batches that flow through the pipeline in one optimizer step (or one of its
// grad_accum repeats), with the point-to-point exchanges between them. PipelineRunner carries
// them out; the tests run every stage's list against the others' with blocking exchanges.
//
//   1f1b:        Megatron's non-interleaved one-forward-one-backward (PipeDream-Flush): stage s
//                runs pp - s - 1 warm-up forwards, then alternates one forward and one backward,
//                then drains the backwards; so it keeps at most pp - s micro-batches' activations.
//   gpipe:       every forward, then every backward; it keeps all of them.
//   interleaved: Megatron's interleaved 1F1B. Each stage holds `virtual_stages` model chunks
//                (stage s chunk c is virtual stage c * pp + s: the activations go round the
//                ring of stages virtual_stages times), and runs the chunks' forwards pp
//                micro-batches at a time. The bubble shrinks by virtual_stages, for
//                virtual_stages times as many exchanges.
// 1f1b and gpipe have the bubble (pp - 1) / (micros + pp - 1) of the time; interleaved
// (pp - 1) / (virtual_stages * micros + pp - 1). All give the same result.
#include <string>
#include <vector>

namespace trainer::parallel {

enum class PipeSchedule { one_f_one_b, gpipe, interleaved };

// "1f1b" | "gpipe" | "interleaved" (parallel.pipeline.schedule); throws config::ConfigError
// naming the key for anything else.
PipeSchedule parse_pipe_schedule(const std::string& name);

// One micro-batch in one model chunk of a stage. micro < 0: none.
struct PipePiece {
  int micro = -1;
  int chunk = 0;
  bool some() const { return micro >= 0; }
  bool operator==(const PipePiece&) const = default;
};

enum class PipeAction {
  forward,   // piece
  backward,  // piece
  // Up to four transfers posted together, then all waited for (dist::Comm::send_recv_batch):
  // Megatron's batched isend/irecv. The ring neighbours: forward goes to stage s + 1 (the last
  // stage's to stage 0, chunk + 1), backward to stage s - 1 (stage 0's to the last, chunk - 1).
  exchange,
};

struct PipeStep {
  PipeAction action = PipeAction::exchange;
  PipePiece piece;                        // forward, backward
  PipePiece send_forward, send_backward;  // exchange: this piece's stage output, input gradient
  PipePiece recv_forward, recv_backward;  // exchange: this piece's stage input, output gradient
  bool operator==(const PipeStep&) const = default;

  static PipeStep run(PipeAction action, PipePiece piece) {
    PipeStep s;
    s.action = action;
    s.piece = piece;
    return s;
  }
  static PipeStep fwd(int micro, int chunk = 0) { return run(PipeAction::forward, {micro, chunk}); }
  static PipeStep bwd(int micro, int chunk = 0) {
    return run(PipeAction::backward, {micro, chunk});
  }
};

// Stage `stage` of `stages`, over `micros` micro-batches, with `virtual_stages` chunks a stage
// (interleaved only; 1 otherwise). Transfers with the ends of the pipeline are left out, and so
// is an exchange left with none.
std::vector<PipeStep> pipeline_steps(PipeSchedule schedule, int stage, int stages, int micros,
                                     int virtual_stages = 1);

// The activation slots of a stage running `steps` (micros pieces of `chunks` chunks): a piece
// holds a slot from its input's receive (or its forward) to the end of its backward, and takes
// a free one (a new one only when all are busy). Any chunk's piece may take any plain slot; the
// pieces of chunk `head_chunk` (the last stage's last chunk, whose slots hold the head's tensors
// too; -1: none) take only head slots. So plain and head are the most pieces in flight at once of
// the other chunks and of that one.
struct PipeSlots {
  int plain = 0, head = 0;
  std::vector<int> slot_of;  // [chunk * micros + micro]: plain slots 0.., then the head's
};
PipeSlots activation_slots(const std::vector<PipeStep>& steps, int head_chunk, int micros,
                           int chunks);
// The head chunk of stage `stage` of `stages` with `virtual_stages` chunks: the last chunk of the
// last stage, else -1.
int head_chunk_of(int stage, int stages, int virtual_stages);
// A schedule's slots on a stage, plain + head (1f1b: pp - stage; gpipe: micros).
int micros_in_flight(PipeSchedule schedule, int stage, int stages, int micros,
                     int virtual_stages = 1);

// The schedule's idle fraction of a stage's time when every chunk's forward and backward takes
// the same time on every stage: (pp - 1) / (virtual_stages * micros + pp - 1).
double bubble_fraction(int stages, int micros, int virtual_stages = 1);

}  // namespace trainer::parallel

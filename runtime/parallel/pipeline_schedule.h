#pragma once
// Pipeline schedules as data: the order in which one stage runs the forward and backward passes
// of the micro-batches that flow through the pipeline in one optimizer step (or one of its
// grad_accum repeats), with the point-to-point exchanges around them. PipelineRunner carries
// them out; the tests run every stage's list against the others' with blocking exchanges.
//
//   1f1b:  Megatron's non-interleaved one-forward-one-backward (PipeDream-Flush): stage s runs
//          pp - s - 1 warm-up forwards, then alternates one forward and one backward, then drains
//          the backwards; so it keeps at most pp - s micro-batches' activations.
//   gpipe: every forward, then every backward; it keeps all of them.
// Both have the same bubble, (pp - 1) / (micros + pp - 1) of the time, and give the same result.
#include <string>
#include <vector>

namespace trainer::parallel {

enum class PipeSchedule { one_f_one_b, gpipe };

// "1f1b" | "gpipe" (parallel.pipeline.schedule); throws config::ConfigError naming the key for
// anything else ("interleaved" is named as not built yet).
PipeSchedule parse_pipe_schedule(const std::string& name);

enum class PipeAction {
  recv_forward,                // micro's stage input, from the previous stage
  forward,                     // micro
  send_forward,                // micro's stage output, to the next stage
  send_forward_recv_backward,  // micro's output to, and other's output gradient from, the next
  backward,                    // micro
  send_backward,               // micro's input gradient, to the previous stage
  send_backward_recv_forward,  // micro's input gradient to, and other's input from, the previous
  recv_backward,               // micro's output gradient, from the next stage
};

struct PipeStep {
  PipeAction action;
  int micro = 0;
  int other = -1;  // the micro-batch received by the combined exchanges
  bool operator==(const PipeStep&) const = default;
};

// Stage `stage` of `stages`, over `micros` micro-batches. (At the ends of the pipeline the
// exchanges with the missing neighbour are no-ops; the list is the same shape on every stage.)
std::vector<PipeStep> pipeline_steps(PipeSchedule schedule, int stage, int stages, int micros);

// The most micro-batches whose activations the stage keeps at once: its activation slots.
int micros_in_flight(PipeSchedule schedule, int stage, int stages, int micros);

// The schedule's idle fraction of a stage's time when every forward and backward takes the same
// time on every stage: (pp - 1) / (micros + pp - 1).
double bubble_fraction(int stages, int micros);

}  // namespace trainer::parallel

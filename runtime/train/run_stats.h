#pragma once
// The figures of the run report that every rank contributes, gathered on the world comm at the
// end of a run (each a collective: every rank calls it), the step-time mean the loop keeps, and
// this rank's memory breakdown.
#include <cstdint>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/mesh.h"
#include "runtime/report/run_report.h"
#include "runtime/train/train_step.h"

namespace trainer::train {

// Every rank's median step time (report::median_step_time).
std::vector<double> gather_median_step_times(dist::Comm* world, const std::vector<double>& mine);

// Each rank's peak memory: its device's (what the backend took from it), or the host's.
std::vector<int64_t> gather_peak_memory(dist::Comm* world, const Backend& backend);

// Each pipeline stage's first rank's memory breakdown (dp, cp, tp index 0), in stage order.
std::vector<report::MemoryBreakdown> gather_stage_memory(dist::Comm* world, const dist::Mesh& mesh,
                                                         const report::MemoryBreakdown& mine);

// Nodes in the run: distinct host names over the world (world / local world size is wrong where
// Slurm places tasks unevenly, e.g. 2 + 1).
int count_nodes(dist::Comm* world);

// The model state and activations of this rank as allocated now (the report's memory breakdown).
report::MemoryBreakdown memory_breakdown(const TrainStep& step);

// The mean of v[skip:], NaN when empty.
double mean_after(const std::vector<double>& v, int skip);

}  // namespace trainer::train

#pragma once
// Slurm host list syntax (SLURM_NODELIST, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE), expanded
// without calling `scontrol`, so detection works inside any container.
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::dist {

struct SlurmSyntaxError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// "node[01-04,07]" -> node01 node02 node03 node04 node07; "a1,b[2-3]" -> a1 b2 b3;
// "gpu-[001-003]-ib" -> gpu-001-ib ...; "rack[1-2]-n[1-2]" -> rack1-n1 rack1-n2 rack2-n1 rack2-n2
// (the first bracket group varies slowest). A range keeps the zero padding of its lower bound.
// Throws SlurmSyntaxError (naming the list) on unbalanced brackets or malformed ranges.
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist);

// The first host of a host list (the rendezvous master under Slurm).
std::string first_slurm_host(const std::string& nodelist);

// SLURM_TASKS_PER_NODE syntax: "2(x3),1" -> {2, 2, 2, 1} (one entry per node).
std::vector<int> expand_slurm_tasks_per_node(const std::string& spec);

}  // namespace trainer::dist

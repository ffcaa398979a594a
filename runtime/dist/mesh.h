#pragma once
// Mesh: the process grid (DESIGN.md "Process grid"). World = dp x pp x cp x tp with tp fastest:
//   rank = ((dp * PP + pp) * CP + cp) * TP + tp
// Expert parallelism reuses the dp x cp ranks: within each dp x cp group (ordered by
// dp * CP + cp), the ep groups are consecutive blocks of `ep` members, and the expert-data-parallel
// (edp) groups join the members at the same position of every block (stride ep).
//
// The grid logic is pure (no communication); create_comms() then makes one Comm per group this
// rank belongs to, plus the world comm, and comm(Axis) hands them out.
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/store.h"

namespace trainer::dist {

enum class Axis { world, dp, pp, cp, tp, dp_cp, cp_tp, ep, edp };
inline constexpr std::array<Axis, 9> kAllAxes = {Axis::world, Axis::dp, Axis::pp,
                                                 Axis::cp,    Axis::tp, Axis::dp_cp,
                                                 Axis::cp_tp, Axis::ep, Axis::edp};
const char* axis_name(Axis a);  // "world", "dp", ..., "dp_cp", "cp_tp", "ep", "edp"

struct MeshShape {
  int dp = 1, pp = 1, cp = 1, tp = 1, ep = 1;
  int world() const { return dp * pp * cp * tp; }
};

// Resolves `parallel.dp: auto` (dp == 0) to world / (pp * cp * tp); throws config::ConfigError
// naming the keys when the sizes do not divide.
MeshShape resolve_mesh_shape(const config::ParallelConfig& p, int world_size);

struct MeshCoord {
  int dp = 0, pp = 0, cp = 0, tp = 0;
  bool operator==(const MeshCoord&) const = default;
};

// Makes one communicator: store prefix "<axis>/<group index>", this rank's index in the group,
// the group size, and options carrying the name and global ranks. The default makes GlooComms.
using CommFactory = std::function<std::unique_ptr<Comm>(const std::string& prefix, int rank,
                                                        int size, const CommOptions& opts)>;

class Mesh {
 public:
  // Throws config::ConfigError when world_size != dp*pp*cp*tp, a size is < 1, or ep does not
  // divide dp*cp; CheckError when rank is outside the world.
  Mesh(int rank, int world_size, MeshShape shape);

  int rank() const { return rank_; }
  int world_size() const { return shape_.world(); }
  const MeshShape& shape() const { return shape_; }

  MeshCoord coord() const { return coord_of(rank_); }
  MeshCoord coord_of(int rank) const;
  int rank_of(const MeshCoord& c) const;

  int size(Axis a) const;   // members per group of that axis
  int index(Axis a) const;  // this rank's position in its group
  std::vector<int> group(Axis a) const { return group_of(a, rank_); }
  std::vector<int> group_of(Axis a, int rank) const;  // global ranks, by position
  int group_id(Axis a, int rank) const;               // which group of the axis (0-based)
  int group_count(Axis a) const { return world_size() / size(a); }
  std::vector<std::vector<int>> groups(Axis a) const;  // all groups of the axis, by group_id

  // Pipeline neighbours: the same dp/cp/tp coordinate one stage before/after; -1 at the ends.
  int pp_prev() const;
  int pp_next() const;
  bool is_first_stage() const { return coord().pp == 0; }
  bool is_last_stage() const { return coord().pp == shape_.pp - 1; }

  // Makes the world comm and one comm per axis group of this rank, in kAllAxes order (the same on
  // every rank, so the rendezvous cannot deadlock).
  void create_comms(const CommFactory& factory, double timeout_s);
  // GlooComms rendezvoused through prefix stores of `store`.
  void create_comms(std::shared_ptr<Store> store, double timeout_s);
  Comm& comm(Axis a) const;  // CheckError before create_comms

 private:
  long long group_key(Axis a, int rank) const;  // equal for members of one group
  int position(Axis a, int rank) const;         // position within that group

  int rank_;
  MeshShape shape_;
  std::array<std::unique_ptr<Comm>, kAllAxes.size()> comms_;  // destroyed last made first
};

}  // namespace trainer::dist

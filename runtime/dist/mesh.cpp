#include "runtime/dist/mesh.h"

#include <algorithm>
#include <string>

#include "runtime/core/check.h"

namespace trainer::dist {
namespace {

[[noreturn]] void config_fail(const std::string& msg) {
  throw config::ConfigError(msg);
}

std::string grid_string(const MeshShape& s) {
  return "dp=" + std::to_string(s.dp) + " pp=" + std::to_string(s.pp) +
         " cp=" + std::to_string(s.cp) + " tp=" + std::to_string(s.tp);
}

void validate_shape(const MeshShape& s, int world_size) {
  const std::pair<const char*, int> sizes[] = {
      {"dp", s.dp}, {"pp", s.pp}, {"cp", s.cp}, {"tp", s.tp}, {"ep", s.ep}};
  for (const auto& [key, v] : sizes)
    if (v < 1)
      config_fail("parallel." + std::string(key) + "=" + std::to_string(v) + " must be >= 1");
  if (s.world() != world_size)
    config_fail("world size " + std::to_string(world_size) +
                " != dp*pp*cp*tp = " + std::to_string(s.world()) + " (" + grid_string(s) + ")");
  if ((s.dp * s.cp) % s.ep != 0)
    config_fail("parallel.ep=" + std::to_string(s.ep) +
                " must divide dp*cp = " + std::to_string(s.dp * s.cp));
}

}  // namespace

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::world:
      return "world";
    case Axis::dp:
      return "dp";
    case Axis::pp:
      return "pp";
    case Axis::cp:
      return "cp";
    case Axis::tp:
      return "tp";
    case Axis::dp_cp:
      return "dp_cp";
    case Axis::cp_tp:
      return "cp_tp";
    case Axis::ep:
      return "ep";
    case Axis::edp:
      return "edp";
  }
  return "?";
}

MeshShape resolve_mesh_shape(const config::ParallelConfig& p, int world_size) {
  MeshShape s{config::resolved_dp(p, world_size), p.pp, p.cp, p.tp, p.ep};
  validate_shape(s, world_size);
  return s;
}

Mesh::Mesh(int rank, int world_size, MeshShape shape) : rank_(rank), shape_(shape) {
  validate_shape(shape_, world_size);
  TRAINER_CHECK(rank >= 0 && rank < world_size, "rank " << rank << " of " << world_size);
}

MeshCoord Mesh::coord_of(int r) const {
  TRAINER_CHECK(r >= 0 && r < world_size(), "rank " << r << " of " << world_size());
  MeshCoord c;
  c.tp = r % shape_.tp;
  r /= shape_.tp;
  c.cp = r % shape_.cp;
  r /= shape_.cp;
  c.pp = r % shape_.pp;
  c.dp = r / shape_.pp;
  return c;
}

int Mesh::rank_of(const MeshCoord& c) const {
  TRAINER_CHECK(c.dp >= 0 && c.dp < shape_.dp && c.pp >= 0 && c.pp < shape_.pp && c.cp >= 0 &&
                    c.cp < shape_.cp && c.tp >= 0 && c.tp < shape_.tp,
                "coordinate (" << c.dp << "," << c.pp << "," << c.cp << "," << c.tp << ") outside "
                               << grid_string(shape_));
  return ((c.dp * shape_.pp + c.pp) * shape_.cp + c.cp) * shape_.tp + c.tp;
}

int Mesh::size(Axis a) const {
  const MeshShape& s = shape_;
  switch (a) {
    case Axis::world:
      return s.world();
    case Axis::dp:
      return s.dp;
    case Axis::pp:
      return s.pp;
    case Axis::cp:
      return s.cp;
    case Axis::tp:
      return s.tp;
    case Axis::dp_cp:
      return s.dp * s.cp;
    case Axis::cp_tp:
      return s.cp * s.tp;
    case Axis::ep:
      return s.ep;
    case Axis::edp:
      return s.dp * s.cp / s.ep;
  }
  return 0;
}

// A group is the set of ranks that agree on every coordinate outside the axis; the key packs
// those coordinates (mixed radix), the position is the rank's place along the axis.
long long Mesh::group_key(Axis a, int r) const {
  const MeshCoord c = coord_of(r);
  const MeshShape& s = shape_;
  const long long dc = c.dp * s.cp + c.cp;  // position in the dp x cp group
  switch (a) {
    case Axis::world:
      return 0;
    case Axis::dp:
      return (c.pp * s.cp + c.cp) * s.tp + c.tp;
    case Axis::pp:
      return (c.dp * s.cp + c.cp) * s.tp + c.tp;
    case Axis::cp:
      return (c.dp * s.pp + c.pp) * s.tp + c.tp;
    case Axis::tp:
      return (c.dp * s.pp + c.pp) * s.cp + c.cp;
    case Axis::dp_cp:
      return c.pp * s.tp + c.tp;
    case Axis::cp_tp:
      return c.dp * s.pp + c.pp;
    case Axis::ep:
      return (c.pp * s.tp + c.tp) * s.world() + dc / s.ep;
    case Axis::edp:
      return (c.pp * s.tp + c.tp) * s.world() + dc % s.ep;
  }
  return 0;
}

int Mesh::position(Axis a, int r) const {
  const MeshCoord c = coord_of(r);
  const MeshShape& s = shape_;
  const int dc = c.dp * s.cp + c.cp;
  switch (a) {
    case Axis::world:
      return r;
    case Axis::dp:
      return c.dp;
    case Axis::pp:
      return c.pp;
    case Axis::cp:
      return c.cp;
    case Axis::tp:
      return c.tp;
    case Axis::dp_cp:
      return dc;
    case Axis::cp_tp:
      return c.cp * s.tp + c.tp;
    case Axis::ep:
      return dc % s.ep;
    case Axis::edp:
      return dc / s.ep;
  }
  return 0;
}

int Mesh::index(Axis a) const {
  return position(a, rank_);
}

std::vector<int> Mesh::group_of(Axis a, int r) const {
  std::vector<int> members(size(a), -1);
  const long long key = group_key(a, r);
  for (int s = 0; s < world_size(); ++s)
    if (group_key(a, s) == key) members.at(position(a, s)) = s;
  return members;
}

// Groups are numbered in the order of their lowest rank.
int Mesh::group_id(Axis a, int r) const {
  const long long key = group_key(a, r);
  std::vector<long long> seen;
  for (int s = 0; s < world_size(); ++s) {
    long long k = group_key(a, s);
    if (k == key) return static_cast<int>(seen.size());
    if (std::find(seen.begin(), seen.end(), k) == seen.end()) seen.push_back(k);
  }
  return -1;
}

std::vector<std::vector<int>> Mesh::groups(Axis a) const {
  std::vector<std::vector<int>> out;
  for (int s = 0; s < world_size(); ++s)
    if (group_of(a, s).front() == s) out.push_back(group_of(a, s));
  return out;
}

int Mesh::pp_prev() const {
  MeshCoord c = coord();
  if (c.pp == 0) return -1;
  --c.pp;
  return rank_of(c);
}

int Mesh::pp_next() const {
  MeshCoord c = coord();
  if (c.pp == shape_.pp - 1) return -1;
  ++c.pp;
  return rank_of(c);
}

}  // namespace trainer::dist

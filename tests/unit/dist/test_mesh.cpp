// Mesh grid logic against a brute-force reference: rank order, coordinates, and group memberships
// for many shapes.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/core/check.h"
#include "runtime/dist/mesh.h"

using trainer::dist::Axis;
using trainer::dist::axis_name;
using trainer::dist::kAllAxes;
using trainer::dist::Mesh;
using trainer::dist::MeshCoord;
using trainer::dist::MeshShape;

namespace {

const std::vector<MeshShape> kShapes = {
    {1, 1, 1, 1, 1}, {2, 1, 1, 1, 1}, {1, 1, 1, 4, 1}, {2, 2, 1, 2, 1}, {2, 2, 2, 2, 1},
    {3, 2, 1, 2, 1}, {4, 1, 1, 1, 2}, {2, 1, 2, 1, 4}, {4, 2, 1, 2, 2}, {3, 1, 2, 2, 3},
    {2, 2, 2, 2, 2}, {6, 1, 1, 1, 3}, {1, 4, 1, 1, 1}, {1, 1, 3, 1, 3},
};

std::string describe(const MeshShape& s) {
  std::ostringstream os;
  os << "dp=" << s.dp << " pp=" << s.pp << " cp=" << s.cp << " tp=" << s.tp << " ep=" << s.ep;
  return os.str();
}

std::string str(const std::vector<int>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
  return os.str() + "]";
}

// All coordinates in rank order, by nested loops (tp innermost).
std::vector<MeshCoord> reference_coords(const MeshShape& s) {
  std::vector<MeshCoord> out;
  for (int d = 0; d < s.dp; ++d)
    for (int p = 0; p < s.pp; ++p)
      for (int c = 0; c < s.cp; ++c)
        for (int t = 0; t < s.tp; ++t) out.push_back({d, p, c, t});
  return out;
}

// Brute-force group of `r`: ranks agreeing on the coordinates outside the axis, in rank order.
std::vector<int> reference_group(const MeshShape& s, Axis a, int r) {
  auto coords = reference_coords(s);
  auto same = [&](int x, int y) {
    const MeshCoord &u = coords[x], &v = coords[y];
    switch (a) {
      case Axis::world:
        return true;
      case Axis::dp:
        return u.pp == v.pp && u.cp == v.cp && u.tp == v.tp;
      case Axis::pp:
        return u.dp == v.dp && u.cp == v.cp && u.tp == v.tp;
      case Axis::cp:
        return u.dp == v.dp && u.pp == v.pp && u.tp == v.tp;
      case Axis::tp:
        return u.dp == v.dp && u.pp == v.pp && u.cp == v.cp;
      case Axis::dp_cp:
      case Axis::ep:
      case Axis::edp:
        return u.pp == v.pp && u.tp == v.tp;
      case Axis::cp_tp:
        return u.dp == v.dp && u.pp == v.pp;
    }
    return false;
  };
  std::vector<int> g;
  for (int x = 0; x < s.world(); ++x)
    if (same(x, r)) g.push_back(x);
  if (a != Axis::ep && a != Axis::edp) return g;
  // Expert groups: consecutive blocks of ep within the dp x cp group, and strided partners.
  int pos = static_cast<int>(std::find(g.begin(), g.end(), r) - g.begin());
  std::vector<int> sub;
  for (int i = 0; i < static_cast<int>(g.size()); ++i) {
    bool member = a == Axis::ep ? i / s.ep == pos / s.ep : i % s.ep == pos % s.ep;
    if (member) sub.push_back(g[i]);
  }
  return sub;
}

}  // namespace

TEST_CASE("rank_order_matches_the_formula_and_round_trips", "[mesh]") {
  for (const auto& s : kShapes) {
    INFO(describe(s));
    Mesh m(0, s.world(), s);
    auto coords = reference_coords(s);
    for (int r = 0; r < s.world(); ++r) {
      const MeshCoord& c = coords[r];
      INFO("rank " << r << " reference coord " << c.dp << "," << c.pp << "," << c.cp << ","
                   << c.tp);
      CHECK(((c.dp * s.pp + c.pp) * s.cp + c.cp) * s.tp + c.tp == r);
      CHECK(m.rank_of(c) == r);
      CHECK(m.coord_of(r) == c);
      CHECK(Mesh(r, s.world(), s).coord() == c);
    }
  }
}

TEST_CASE("group_memberships_match_the_brute_force_reference", "[mesh]") {
  for (const auto& s : kShapes) {
    for (int r = 0; r < s.world(); ++r) {
      Mesh m(r, s.world(), s);
      for (Axis a : kAllAxes) {
        auto expected = reference_group(s, a, r);
        auto got = m.group(a);
        INFO(describe(s) << " rank " << r << " axis " << axis_name(a) << " expected "
                         << str(expected) << " got " << str(got));
        CHECK(got == expected);
        CHECK(static_cast<int>(got.size()) == m.size(a));
        CHECK(got.at(m.index(a)) == r);
      }
    }
  }
}

TEST_CASE("groups_of_each_axis_partition_the_world", "[mesh]") {
  for (const auto& s : kShapes) {
    Mesh m(0, s.world(), s);
    for (Axis a : kAllAxes) {
      INFO(describe(s) << " axis " << axis_name(a));
      auto groups = m.groups(a);
      CHECK(static_cast<int>(groups.size()) == m.group_count(a));
      std::map<int, int> times_seen;
      for (size_t gi = 0; gi < groups.size(); ++gi) {
        CHECK(static_cast<int>(groups[gi].size()) == m.size(a));
        for (int r : groups[gi]) {
          ++times_seen[r];
          CHECK(m.group_id(a, r) == static_cast<int>(gi));
          CHECK(m.group_of(a, r) == groups[gi]);
        }
      }
      CHECK(static_cast<int>(times_seen.size()) == s.world());
      for (const auto& [r, n] : times_seen) {
        INFO("rank " << r << " seen " << n << " times");
        CHECK(n == 1);
      }
    }
  }
}

TEST_CASE("ep_groups_tile_the_dp_cp_group", "[mesh]") {
  for (const auto& s : kShapes) {
    Mesh m(0, s.world(), s);
    INFO(describe(s));
    CHECK(m.size(Axis::ep) * m.size(Axis::edp) == m.size(Axis::dp_cp));
    for (int r = 0; r < s.world(); ++r) {
      auto dpcp = m.group_of(Axis::dp_cp, r);
      auto ep = m.group_of(Axis::ep, r);
      auto edp = m.group_of(Axis::edp, r);
      std::set<int> both;
      for (int x : ep)
        if (std::find(edp.begin(), edp.end(), x) != edp.end()) both.insert(x);
      CHECK(both == std::set<int>{r});  // an ep group and an edp group meet in one rank
      for (int x : ep) CHECK(std::find(dpcp.begin(), dpcp.end(), x) != dpcp.end());
      for (int x : edp) CHECK(std::find(dpcp.begin(), dpcp.end(), x) != dpcp.end());
    }
  }
}

TEST_CASE("pipeline_neighbours_are_one_stage_apart", "[mesh]") {
  for (const auto& s : kShapes) {
    for (int r = 0; r < s.world(); ++r) {
      Mesh m(r, s.world(), s);
      MeshCoord c = m.coord();
      INFO(describe(s) << " rank " << r << " prev " << m.pp_prev() << " next " << m.pp_next());
      auto pp = m.group(Axis::pp);
      CHECK(m.pp_prev() == (c.pp == 0 ? -1 : pp[c.pp - 1]));
      CHECK(m.pp_next() == (c.pp == s.pp - 1 ? -1 : pp[c.pp + 1]));
      CHECK(m.is_first_stage() == (m.pp_prev() == -1));
      CHECK(m.is_last_stage() == (m.pp_next() == -1));
    }
  }
}

TEST_CASE("bad_shapes_are_config_errors_naming_the_sizes", "[mesh]") {
  using trainer::config::ConfigError;
  CHECK_THROWS_AS(Mesh(0, 8, MeshShape{2, 1, 1, 2, 1}), ConfigError);
  CHECK_THROWS_WITH(Mesh(0, 8, MeshShape{2, 1, 1, 2, 1}), Catch::Contains("dp*pp*cp*tp"));
  CHECK_THROWS_WITH(Mesh(0, 4, MeshShape{4, 1, 1, 1, 3}), Catch::Contains("parallel.ep=3"));
  CHECK_THROWS_WITH(Mesh(0, 2, MeshShape{2, 1, 1, 1, 0}), Catch::Contains("parallel.ep=0"));
  CHECK_THROWS_AS(Mesh(4, 4, MeshShape{4, 1, 1, 1, 1}), trainer::CheckError);
}

TEST_CASE("dp_auto_is_world_over_model_parallel_sizes", "[mesh]") {
  trainer::config::ParallelConfig p;
  p.dp = 0;
  p.tp = 2;
  p.pp = 2;
  for (int world : {4, 8, 12}) {
    INFO("world " << world);
    CHECK(trainer::dist::resolve_mesh_shape(p, world).dp == world / (p.tp * p.pp));
  }
  CHECK_THROWS_WITH(trainer::dist::resolve_mesh_shape(p, 6),
                    Catch::Contains("parallel.dp = auto is world / (pp * cp * tp)"));
  p.dp = 3;
  CHECK_THROWS_AS(trainer::dist::resolve_mesh_shape(p, 8), trainer::config::ConfigError);
}

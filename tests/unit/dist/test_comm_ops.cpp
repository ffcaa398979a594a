// Every Comm op and dtype on N = 1..4 ranks (threads), each result against a reference computed
// here from the same rank-dependent inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <sstream>

#include "comm_harness.h"
#include "runtime/dist/comm_dispatch.h"

using namespace trainer::dist;
using namespace trainer::dist::testing;

namespace {

using Results = std::map<std::string, std::vector<double>>;

// Small non-negative integers, so sums of 4 ranks fit in u8 and every type is exact.
double input(int rank, size_t i, int salt) {
  return static_cast<double>(((rank + 1) * 7 + static_cast<int>(i) * 3 + salt) % 50);
}

template <typename T>
std::vector<T> make_input(int rank, size_t n, int salt) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(input(rank, i, salt));
  return v;
}

template <typename T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

const char* dtype_label(CommDType t) {
  const char* names[] = {"f32", "f64", "i32", "i64", "u8"};
  return names[static_cast<int>(t)];
}
const char* op_label(ReduceOp op) {
  const char* names[] = {"sum", "avg", "max"};
  return names[static_cast<int>(op)];
}

constexpr CommDType kDtypes[] = {CommDType::f32, CommDType::f64, CommDType::i32, CommDType::i64,
                                 CommDType::u8};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};
constexpr size_t kCount = 37;  // odd, so chunking edge cases show

double reduce_ref(int n, size_t i, int salt, ReduceOp op, bool integral) {
  double acc = op == ReduceOp::max ? -1e300 : 0;
  for (int r = 0; r < n; ++r)
    acc = op == ReduceOp::max ? std::max(acc, input(r, i, salt)) : acc + input(r, i, salt);
  if (op == ReduceOp::avg) acc = integral ? std::floor(acc / n) : acc / n;
  return acc;
}

void run_all_ops(RankContext& ctx, Comm& comm, Results& out) {
  int r = ctx.rank, n = ctx.size;
  auto sn = static_cast<size_t>(n);
  for (CommDType t : kDtypes) {
    std::string d = dtype_label(t);
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      for (ReduceOp op : kOps) {
        auto v = make_input<T>(r, kCount, 1);
        comm.all_reduce(v.data(), kCount, t, op);
        out["all_reduce/" + d + "/" + op_label(op)] = as_double(v);
        auto in = make_input<T>(r, kCount * sn, 2);
        std::vector<T> chunk(kCount);
        comm.reduce_scatter(in.data(), chunk.data(), kCount, t, op);
        out["reduce_scatter/" + d + "/" + op_label(op)] = as_double(chunk);
        auto to_root = make_input<T>(r, kCount, 7);  // (the others' copies are scratch)
        comm.reduce_async(to_root.data(), kCount, t, op, n - 1)->wait();
        if (r == n - 1) out["reduce/" + d + "/" + op_label(op)] = as_double(to_root);
      }
      auto mine = make_input<T>(r, kCount, 3);
      std::vector<T> all(kCount * sn);
      comm.all_gather(mine.data(), all.data(), kCount, t);
      out["all_gather/" + d] = as_double(all);
      auto b = make_input<T>(r, kCount, 4);
      comm.broadcast(b.data(), kCount, t, n - 1);
      out["broadcast/" + d] = as_double(b);
      auto from_first = make_input<T>(r, kCount, 8);
      comm.broadcast_async(from_first.data(), kCount, t, 0)->wait();
      out["broadcast_async/" + d] = as_double(from_first);
      auto a2a_in = make_input<T>(r, kCount * sn, 5);
      std::vector<T> a2a_out(kCount * sn);
      comm.all_to_all(a2a_in.data(), a2a_out.data(), kCount, t);
      out["all_to_all/" + d] = as_double(a2a_out);
    });
  }
  // Point to point around the ring (rank 1 receives first, so blocking sends cannot deadlock).
  auto payload = make_input<int32_t>(r, kCount, 6);
  std::vector<int32_t> got(kCount);
  int right = (r + 1) % n, left = (r + n - 1) % n;
  size_t bytes = kCount * sizeof(int32_t);
  if (r == 1) comm.recv(got.data(), bytes, left, 9);
  comm.send(payload.data(), bytes, right, 9);
  if (r != 1) comm.recv(got.data(), bytes, left, 9);
  out["send_recv"] = as_double(got);
  // Every rank sends right and receives from the left at once: with blocking sends all would wait
  // for a receive; send_recv posts both first.
  std::vector<int32_t> paired(kCount);
  comm.send_recv(payload.data(), bytes, right, paired.data(), bytes, left, 10);
  out["send_recv/paired"] = as_double(paired);
  comm.barrier();
}

// What rank r of n must have seen for key `key`.
std::vector<double> expected(const std::string& key, int r, int n) {
  auto sn = static_cast<size_t>(n);
  std::vector<double> e;
  std::string kind = key.substr(0, key.find('/'));
  bool integral = key.find("/f32") == std::string::npos && key.find("/f64") == std::string::npos;
  ReduceOp op = key.find("/max") != std::string::npos   ? ReduceOp::max
                : key.find("/avg") != std::string::npos ? ReduceOp::avg
                                                        : ReduceOp::sum;
  if (kind == "all_reduce")
    for (size_t i = 0; i < kCount; ++i) e.push_back(reduce_ref(n, i, 1, op, integral));
  if (kind == "reduce_scatter")
    for (size_t i = 0; i < kCount; ++i)
      e.push_back(reduce_ref(n, static_cast<size_t>(r) * kCount + i, 2, op, integral));
  if (kind == "all_gather")
    for (int src = 0; src < n; ++src)
      for (size_t i = 0; i < kCount; ++i) e.push_back(input(src, i, 3));
  if (kind == "reduce")
    for (size_t i = 0; i < kCount; ++i) e.push_back(reduce_ref(n, i, 7, op, integral));
  if (kind == "broadcast")
    for (size_t i = 0; i < kCount; ++i) e.push_back(input(n - 1, i, 4));
  if (kind == "broadcast_async")
    for (size_t i = 0; i < kCount; ++i) e.push_back(input(0, i, 8));
  if (kind == "all_to_all")
    for (int src = 0; src < n; ++src)
      for (size_t i = 0; i < kCount; ++i)
        e.push_back(input(src, static_cast<size_t>(r) * kCount + i, 5));
  if (kind == "send_recv")
    for (size_t i = 0; i < kCount; ++i) e.push_back(input((r + n - 1) % n, i, 6));
  (void)sn;
  return e;
}

bool close_enough(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > 1e-5 * std::max(1.0, std::abs(b[i]))) return false;
  return true;
}

std::string str(const std::vector<double>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size() && i < 12; ++i) os << v[i] << " ";
  if (v.size() > 12) os << "... (" << v.size() << " values)";
  return os.str();
}

}  // namespace

TEST_CASE("every_op_and_dtype_matches_a_local_reference_for_1_to_4_ranks", "[comm]") {
  for (int n = 1; n <= 4; ++n) {
    std::vector<Results> results(static_cast<size_t>(n));
    auto errors = run_ranks(n, [&](RankContext& ctx) {
      auto comm = make_comm(ctx, 10.0);
      run_all_ops(ctx, *comm, results[static_cast<size_t>(ctx.rank)]);
    });
    for (int r = 0; r < n; ++r) {
      INFO("world size " << n << ", rank " << r);
      CHECK(errors[static_cast<size_t>(r)] == "");
      for (const auto& [key, got] : results[static_cast<size_t>(r)]) {
        auto want = expected(key, r, n);
        INFO(key << "\n  got:  " << str(got) << "\n  want: " << str(want));
        CHECK(close_enough(got, want));
      }
      // + both send_recv; the root also the reduces
      CHECK(results[static_cast<size_t>(r)].size() ==
            5 * (3 * 2 + 4) + 2 + (r == n - 1 ? 5 * 3 : 0));
    }
  }
}

TEST_CASE("self_send_and_recv_on_one_rank_go_through_a_local_mailbox", "[comm]") {
  auto errors = run_ranks(1, [](RankContext& ctx) {
    auto comm = make_comm(ctx, 5.0);
    std::vector<double> a = {1, 2, 3}, b(3);
    comm->send(a.data(), 3 * sizeof(double), 0, 4);
    comm->recv(b.data(), 3 * sizeof(double), 0, 4);
    if (a != b) throw std::runtime_error("self recv got other bytes");
    comm->recv(b.data(), 3 * sizeof(double), 0, 4);  // nothing left: must fail clearly
  });
  CHECK(errors[0].find("recv") != std::string::npos);
  CHECK(errors[0].find("no earlier send") != std::string::npos);
}

TEST_CASE("async_ops_in_flight_together_complete_when_waited_out_of_order", "[comm]") {
  constexpr int kN = 3, kOps = 6;
  constexpr size_t kLen = 1 << 16;
  std::vector<std::vector<std::vector<float>>> bufs(kN);
  auto errors = run_ranks(kN, [&](RankContext& ctx) {
    auto comm = make_comm(ctx, 10.0);
    auto& mine = bufs[static_cast<size_t>(ctx.rank)];
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kOps; ++k) {
      mine.emplace_back(kLen, static_cast<float>(ctx.rank * 10 + k));
      works.push_back(
          comm->all_reduce_async(mine.back().data(), kLen, CommDType::f32, ReduceOp::sum));
    }
    for (int k = kOps - 1; k >= 0; --k) works[static_cast<size_t>(k)]->wait();
    for (auto& w : works)
      if (!w->done()) throw std::runtime_error("work not done after wait");
  });
  for (int r = 0; r < kN; ++r) {
    CHECK(errors[static_cast<size_t>(r)] == "");
    for (int k = 0; k < kOps; ++k) {
      float want = 0;
      for (int s = 0; s < kN; ++s) want += static_cast<float>(s * 10 + k);
      const auto& got = bufs[static_cast<size_t>(r)][static_cast<size_t>(k)];
      INFO("rank " << r << " op " << k << ": got " << got.front() << ".." << got.back() << ", want "
                   << want);
      CHECK(got.front() == want);
      CHECK(got.back() == want);
    }
  }
}

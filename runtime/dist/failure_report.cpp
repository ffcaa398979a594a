#include "runtime/dist/failure_report.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <thread>

#include "runtime/dist/comm.h"

namespace trainer::dist {

bool mentions_address(const std::string& text, const std::string& addr) {
  for (size_t at = text.find(addr); at != std::string::npos; at = text.find(addr, at + 1)) {
    const size_t end = at + addr.size();
    if (end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return true;
  }
  return false;
}

namespace {

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}

std::string rank_list(const std::vector<int>& ranks, const char* separator = ", ") {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : separator) + std::to_string(r);
  return s;
}

// The values of "<prefix><id>" for each id that has one: one store request for all of them.
std::vector<MaybeValue> values_of(Store& store, const std::string& prefix,
                                  const std::vector<int>& ids) {
  std::vector<std::string> keys;
  keys.reserve(ids.size());
  for (int id : ids) keys.push_back(prefix + std::to_string(id));
  return store.get_existing(keys);
}

// 1. Ranks (global) that said why they died.
std::string reported_failures(const FailureScope& s, const std::vector<int>& ranks) {
  const std::vector<MaybeValue> reports = values_of(*s.root_store, "failed/", ranks);
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (reports[i])
      out += (out.empty() ? "" : "; ") +
             ("rank " + std::to_string(ranks[i]) + " failed: " + text(*reports[i]));
  return out;
}

// How long to give the others to reach the same point: they time out about when we did.
double grace_s(const FailureScope& s) {
  return std::clamp(s.timeout_s / 10.0, 0.2, 2.0);
}

// Between two looks at the marks of the others. Every failing member reads a key per member
// each time: the server looks up size^2 keys per period, kept near 2 million a second (20 ms
// up to about 200 members, 0.5 s at 1000).
std::chrono::milliseconds poll_period(const FailureScope& s) {
  const double n = s.size;
  return std::chrono::milliseconds(static_cast<int64_t>(std::clamp(n * n / 2000.0, 20.0, 500.0)));
}

std::vector<int> local_ranks(const FailureScope& s) {
  std::vector<int> out(static_cast<size_t>(s.size));
  for (int j = 0; j < s.size; ++j) out[static_cast<size_t>(j)] = j;
  return out;
}

std::vector<int> other_members(const FailureScope& s) {
  std::vector<int> out;
  for (int j = 0; j < s.size; ++j)
    if (j != s.rank) out.push_back(s.global_rank(j));
  return out;
}

std::vector<int> global_ranks(const FailureScope& s, const std::vector<int>& group_ranks) {
  std::vector<int> out;
  for (int j : group_ranks) out.push_back(s.global_rank(j));
  return out;
}

// Whether a transport error names a peer's address, as Gloo's do ("... peer [127.0.0.1]:4213").
bool names_an_address(const std::string& cause) {
  for (size_t at = cause.find("]:"); at != std::string::npos; at = cause.find("]:", at + 1))
    if (at + 2 < cause.size() && std::isdigit(static_cast<unsigned char>(cause[at + 2])))
      return true;
  return false;
}

// 2. The peer (global rank, or -1) whose pair address appears in the transport's error message;
// `how_out` says how it was found. A member publishes its addresses right after the group
// connected: one that died in between published none, and a broken connection whose address
// matches no published one was to it, when it is the only member without them. (Otherwise the
// rank waits for a report that the dead one never writes, a whole timeout, and rank 0's store,
// which lingers seconds, may be gone by then.)
int broken_peer(const FailureScope& s, const std::string& cause, std::string* how_out) {
  const std::vector<MaybeValue> published = values_of(*s.group_store, "addr/", local_ranks(s));
  std::vector<int> unpublished;
  for (int j = 0; j < s.size; ++j) {
    const MaybeValue& addrs = published[static_cast<size_t>(j)];
    if (j == s.rank) continue;
    if (!addrs) {
      unpublished.push_back(j);
      continue;
    }
    std::istringstream lines(text(*addrs));
    std::string line;
    while (std::getline(lines, line)) {
      auto eq = line.find('=');
      if (eq == std::string::npos || line.substr(0, eq) != std::to_string(s.rank)) continue;
      std::string addr = line.substr(eq + 1);
      if (!addr.empty() && mentions_address(cause, addr)) {
        *how_out = addr;
        return s.global_rank(j);
      }
    }
  }
  if (unpublished.size() == 1 && names_an_address(cause)) {
    *how_out = "the one member that had not published its addresses";
    return s.global_rank(unpublished[0]);
  }
  return -1;
}

// The keys that mark each member's arrival at op `seq`: "arrived/<seq>/<rank in the group>".
std::string arrival_prefix(uint64_t seq) {
  return "arrived/" + std::to_string(seq) + "/";
}

// 3. Ranks (global) without an arrival mark for this op after a grace period (ours is set).
// until_report: the wait also ends once one of `others` reported its failure.
std::vector<int> missing_ranks(const FailureScope& s, uint64_t seq, double grace_s,
                               bool until_report, const std::vector<int>& others) {
  const std::string prefix = arrival_prefix(seq);
  std::vector<std::string> marks;
  for (int j = 0; j < s.size; ++j) marks.push_back(prefix + std::to_string(j));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  std::vector<int> missing;
  do {
    const std::vector<bool> marked = s.group_store->which_exist(marks);
    missing.clear();
    for (int j = 0; j < s.size; ++j)
      if (!marked[static_cast<size_t>(j)]) missing.push_back(s.global_rank(j));
    if (missing.empty() || (until_report && !reported_failures(s, others).empty())) break;
    std::this_thread::sleep_for(poll_period(s));
  } while (std::chrono::steady_clock::now() < deadline);
  return missing;
}

// 4. Where the ranks that did not arrive are stuck. Each rank that timed out publishes whom it
// waited for ("waits_for/<global rank>", the root store); following those from `start` ends at
// ranks that published nothing: hung or dead (or, for a moment, not timed out yet). Waits
// `wait_s` for the others to publish (they time out about when we did), less if every end
// already reported why it died.
std::vector<int> parse_ranks(const std::string& list) {
  std::vector<int> out;
  std::istringstream in(list);
  for (std::string r; std::getline(in, r, ',');) out.push_back(std::stoi(r));
  return out;
}

// Publishes whom this rank waited for: the chains through it go on to them.
void publish_waits_for(const FailureScope& s, const std::vector<int>& ranks) {
  s.root_store->set("waits_for/" + std::to_string(s.global_rank(s.rank)),
                    bytes(rank_list(ranks, ",")));
}

std::vector<int> chain_ends(const FailureScope& s, const std::vector<int>& start, double wait_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (true) {
    std::vector<int> ends, frontier = start;
    std::set<int> seen(start.begin(), start.end());
    while (!frontier.empty()) {  // a request per step along the chains
      const std::vector<MaybeValue> waits = values_of(*s.root_store, "waits_for/", frontier);
      std::vector<int> next_frontier;
      for (size_t i = 0; i < frontier.size(); ++i) {
        if (!waits[i]) {
          ends.push_back(frontier[i]);
          continue;
        }
        for (int next : parse_ranks(text(*waits[i])))
          if (seen.insert(next).second) next_frontier.push_back(next);
      }
      frontier = std::move(next_frontier);
    }
    std::sort(ends.begin(), ends.end());
    const std::vector<MaybeValue> reports = values_of(*s.root_store, "failed/", ends);
    const bool all_reported = !ends.empty() && std::all_of(reports.begin(), reports.end(),
                                                           [](const MaybeValue& v) { return !!v; });
    if (all_reported || std::chrono::steady_clock::now() >= deadline) return ends;
    std::this_thread::sleep_for(poll_period(s));
  }
}

// 5. A broken connection, named by the peer's address, and where that peer was stuck when it
// timed out (its waits_for chain), if it did.
std::string through_broken_peer(const FailureScope& s, const std::string& cause) {
  std::string how;
  const int peer = broken_peer(s, cause, &how);
  if (peer < 0) return "";
  const std::string found = "lost the connection to rank " + std::to_string(peer) + " (" + how +
                            "; it died or closed its communicator)";
  try {
    // Ranks waiting on this one follow their chain through it to the peer, and on from there.
    publish_waits_for(s, {peer});
    // It marks timed_out/<rank> right after its sockets closed: a grace to see the mark (a busy
    // host may take a while between the two; a dead peer's report waits that long).
    const std::string mark = "timed_out/" + std::to_string(peer);
    const auto seen_by =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s(s));
    while (!s.root_store->check({mark})) {
      if (std::chrono::steady_clock::now() >= seen_by) return found;  // it died
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // It publishes whom it waited for after its grace; the chain settles the grace after that.
    const std::vector<int> ends = chain_ends(s, {peer}, 3 * grace_s(s));
    if (ends == std::vector<int>{peer}) return found;
    const std::string why = reported_failures(s, ends);
    return found + ", which timed out waiting in turn on rank(s) " + rank_list(ends) +
           (why.empty() ? " (hung or dead)" : "; " + why);
  } catch (const StoreError&) {
    return found;  // the store went away (rank 0 exited): the peer is named all the same
  }
}

}  // namespace

std::string seconds_text(double s) {
  std::ostringstream os;
  os << s << " s";
  return os.str();
}

std::string cannot_name(const std::exception& e) {
  if (dynamic_cast<const StoreLost*>(&e))  // a TCP store is served by rank 0's process
    return std::string("global rank 0, which serves the rendezvous store, is gone or hung (") +
           e.what() + ")";
  return std::string("could not ask the store which rank failed (") + e.what() + ")";
}

void publish_pair_addresses(Store& group_store, int rank, const std::vector<std::string>& addrs) {
  std::string lines;
  for (size_t j = 0; j < addrs.size(); ++j)
    if (!addrs[j].empty()) lines += std::to_string(j) + "=" + addrs[j] + "\n";
  group_store.set("addr/" + std::to_string(rank), bytes(lines));
}

namespace {

// A transfer's peers (global ranks) that did not complete it: dead, hung, or blocked in another
// op (their chains, followed, say on whom). After an error that named no peer, the one that failed
// is given a grace to report why first.
std::string name_transfer_peers(const FailureScope& s, const std::vector<int>& peers,
                                bool timed_out) {
  if (peers.empty()) return "";  // (only transfers to itself: no one else to name)
  if (!timed_out) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s(s));
    do {
      std::this_thread::sleep_for(poll_period(s));
      const std::string reported = reported_failures(s, peers);
      if (!reported.empty()) return reported;
    } while (std::chrono::steady_clock::now() < deadline);
  }
  return name_missing_ranks(s, peers);
}

}  // namespace

std::string name_failed_ranks(const FailureScope& scope, const OpId& op, const std::string& cause,
                              bool timed_out) {
  std::string found;  // kept when the store goes away after it named someone
  try {
    const std::string me = std::to_string(scope.global_rank(scope.rank));
    // This rank reached the op: marked before anything that waits (following a broken
    // connection's peer takes a few graces), or the members timing out meanwhile count it missing.
    if (!op.p2p)
      scope.group_store->set(arrival_prefix(op.seq) + std::to_string(scope.rank), bytes("1"));
    // Gloo closes a pair's socket as soon as an op on it times out: the peer sees a broken
    // connection to a rank that is alive and only about to name whom it waited for.
    if (timed_out) scope.root_store->set("timed_out/" + me, bytes("1"));
    const std::vector<int> others = op.p2p ? global_ranks(scope, op.peers) : other_members(scope);
    found = reported_failures(scope, others);
    if (found.empty() && !timed_out) found = through_broken_peer(scope, cause);
    // Named: nothing to wait for (our arrival is marked, and the run reports our failure, with
    // this name, for the chains that end at us).
    if (!found.empty()) return found;
    if (op.p2p) return name_transfer_peers(scope, others, timed_out);
    // A short grace after a timeout: the others time out about when we did. After a broken
    // connection we could not map to a rank (one that died before it published its addresses),
    // the live ranks fail at once too, or once they time out: wait for the first report. Whom
    // we wait for is unknown meanwhile; the members still missing after the grace stand for it,
    // so that ranks blocked on this one in other groups follow the chain on through them.
    const bool unknown = !timed_out;
    std::vector<int> missing = missing_ranks(scope, op.seq, grace_s(scope), unknown, others);
    if (unknown) {
      if (!missing.empty()) publish_waits_for(scope, missing);
      missing = missing_ranks(scope, op.seq, scope.timeout_s + 0.5 - grace_s(scope), true, others);
      found = reported_failures(scope, others);
    }
    if (!found.empty() || missing.empty()) return found;
    return name_missing_ranks(scope, missing);
  } catch (const std::exception& e) {
    return found.empty() ? cannot_name(e) : found;
  }
}

std::string name_missing_ranks(const FailureScope& scope, const std::vector<int>& missing) {
  // A rank that did not arrive is hung or dead, or alive and blocked in another op on one that
  // is: name the ends of the chain. Ours, published now, continues the chains through us.
  const std::string ours = "ranks that did not arrive: " + rank_list(missing);
  try {
    publish_waits_for(scope, missing);
    if (scope.release_peers) scope.release_peers();
    const std::vector<int> ends = chain_ends(scope, missing, 2 * grace_s(scope));
    const std::string why = reported_failures(scope, ends);
    std::vector<int> sorted = missing;
    std::sort(sorted.begin(), sorted.end());
    if (ends.empty() || ends == sorted) return why.empty() ? ours : ours + "; " + why;
    return ours + ", blocked in turn on rank(s) " + rank_list(ends) +
           (why.empty() ? " (hung or dead)" : "; " + why);
  } catch (const std::exception& e) {
    return ours + " (not followed further: " + cannot_name(e) + ")";  // who is missing is known
  }
}

void report_failure(Store& store, int global_rank, const std::string& what) {
  try {
    store.set("failed/" + std::to_string(global_rank), bytes(what));
  } catch (...) {
  }
}

}  // namespace trainer::dist

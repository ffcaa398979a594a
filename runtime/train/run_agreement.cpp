#include "runtime/train/run_agreement.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/config/did_you_mean.h"
#include "runtime/core/host_name.h"
#include "runtime/core/sha256.h"
#include "runtime/dist/failure_report.h"

namespace trainer::train {
namespace {

const std::string kPrefix = "run_agreement/";
constexpr size_t kRanksNamed = 3;  // differing ranks a verdict names (the rest are counted)

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string text_of(const std::vector<uint8_t>& b) {
  return {b.begin(), b.end()};
}

std::string this_process() {
  return host_name() + " pid " + std::to_string(::getpid());
}

std::string rank_key(int r) {
  return kPrefix + "rank/" + std::to_string(r);
}

std::string yaml_key(int r) {
  return kPrefix + "yaml/" + std::to_string(r);
}

// Where a second process that claimed a taken RANK says so, for rank 0 (while it waits for the
// others: the rank that the launch left out never comes).
const std::string kDuplicateKey = kPrefix + "duplicate";
const std::string kVerdictKey = kPrefix + "verdict";
// Rank 0's WORLD_SIZE, set as it arrives; and where the first rank whose own differs says so.
// A rank outside rank 0's world (RANK >= its WORLD_SIZE: two nodes launched with different
// --nproc-per-node) has no entry rank 0 reads, and the rank its world misses never comes.
const std::string kWorldKey = kPrefix + "world_size";
const std::string kOtherWorldKey = kPrefix + "other_world";

const std::string kHowToFix =
    "every process of a run must be started with the same WORLD_SIZE, config file, --set "
    "options and --out (a launcher passes the same to all of its ranks)";

bool agrees(const nlohmann::json& entry, int world_size, const std::string& sha) {
  return entry.at("world_size").get<int>() == world_size &&
         entry.at("sha256").get<std::string>() == sha;
}

// Rank 0: every other rank's entry against its own; "" when all agree. It polls the entries as
// they arrive, so a rank that differs ends the wait at once (one that never comes, after the
// store's timeout).
// `sha`: rank 0's config's hash (of config::to_yaml, as config_sha256).
std::string rank0_verdict(dist::Store& store, int world_size, const config::RunConfig& cfg,
                          const std::string& sha) {
  std::vector<std::optional<nlohmann::json>> entry(static_cast<size_t>(world_size));
  const auto deadline = std::chrono::steady_clock::now() + store.timeout();
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    std::vector<int> missing;
    std::vector<std::string> keys;
    for (int r = 1; r < world_size; ++r)
      if (!entry[static_cast<size_t>(r)]) missing.push_back(r), keys.push_back(rank_key(r));
    keys.push_back(kDuplicateKey);
    keys.push_back(kOtherWorldKey);
    std::vector<dist::MaybeValue> got = store.get_existing(keys);
    const auto not_come = [&] {
      std::vector<std::string> names;
      for (int r : missing) names.push_back(std::to_string(r));
      return missing.empty() ? std::string("every rank has come")
                             : "RANK " + config::join(names) + " of WORLD_SIZE " +
                                   std::to_string(world_size) + " has not come";
    };
    if (const dist::MaybeValue other = got.back())
      return "config: the ranks do not run the same thing: " + text_of(*other) + "; " + not_come() +
             " (rank 0 is " + this_process() + "); " + kHowToFix;
    got.pop_back();
    if (got.back())
      return "config: " + text_of(*got.back()) + "; " + not_come() + " (rank 0 is " +
             this_process() + "): the launch gave one RANK to two processes";
    got.pop_back();
    bool differs = false;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!got[i]) continue;
      auto& e = entry[static_cast<size_t>(missing[i])];
      e = nlohmann::json::parse(text_of(*got[i]));
      differs = differs || !agrees(*e, world_size, sha);
      missing[i] = -1;
    }
    std::erase(missing, -1);
    if (differs || missing.empty()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<std::string> names;
      for (int r : missing) names.push_back(std::to_string(r));
      // The form failure_report.cpp writes ("ranks that did not arrive: 6"), which the tests,
      // scripts/fuzz_faults.py and a user's grep for the rank look for; the timeout in
      // fractional seconds (a 0.5 s timeout is not "0 s").
      throw std::runtime_error(
          "ranks that did not arrive: " + config::join(names) + " of WORLD_SIZE " +
          std::to_string(world_size) + " (not at the rendezvous within distributed.timeout_s = " +
          dist::seconds_text(std::chrono::duration<double>(store.timeout()).count()) +
          ": not started, or died or hung before it)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  std::vector<std::string> differences;
  size_t differing = 0;
  for (int r = 1; r < world_size; ++r) {
    const auto& e = entry[static_cast<size_t>(r)];
    if (!e || agrees(*e, world_size, sha)) continue;
    if (++differing > kRanksNamed) continue;
    differences.push_back(run_difference(cfg, world_size, r, e->at("world_size").get<int>(),
                                         text_of(store.get(yaml_key(r))),
                                         e->at("where").get<std::string>()));
  }
  if (differing == 0) return "";
  std::string more;
  if (differing > kRanksNamed)
    more = "; and " + std::to_string(differing - kRanksNamed) + " more rank(s)";
  return "config: the ranks do not run the same thing: " + config::join(differences, "; ") + more +
         " (rank 0 is " + this_process() + "); " + kHowToFix;
}

// A rank other than 0, until rank 0 has come (or given its verdict): if rank 0's WORLD_SIZE is
// not this rank's, it says so where rank 0 looks (the first such rank's words).
void report_another_world(dist::Store& store, int rank, int world_size, const std::string& me,
                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::vector<dist::MaybeValue> got = store.get_existing({kWorldKey, kVerdictKey});
    if (got[1]) return;  // (the verdict says the rest)
    if (got[0]) {
      const int rank0_world = std::stoi(text_of(*got[0]));
      if (rank0_world != world_size && store.add(kOtherWorldKey + "/count", 1) == 1)
        store.set(kOtherWorldKey, bytes_of("rank " + std::to_string(rank) + " (" + me +
                                           ") has WORLD_SIZE " + std::to_string(world_size) +
                                           ", rank 0 has " + std::to_string(rank0_world)));
      return;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace

std::string run_difference(const config::RunConfig& rank0_cfg, int rank0_world, int rank,
                           int world_size, const std::string& config_yaml,
                           const std::string& where) {
  const std::string who = "rank " + std::to_string(rank) + " (" + where + ")";
  if (world_size != rank0_world)
    return who + " has WORLD_SIZE " + std::to_string(world_size) + ", rank 0 has " +
           std::to_string(rank0_world);
  if (sha256_hex(config_yaml) == config::config_sha256(rank0_cfg)) return "";
  std::vector<std::string> changes;
  try {
    changes = config::config_changes(rank0_cfg, config::parse_config(config_yaml));
  } catch (const config::ConfigError&) {  // (a config this build cannot read: the hash says it)
  }
  if (changes.empty()) return who + " runs a config with another hash than rank 0's";
  return who + " runs another config than rank 0: " + config::join(changes, "; ") +
         " (rank 0's value -> rank " + std::to_string(rank) + "'s)";
}

void agree_on_the_run(dist::Store& store, int rank, int world_size, const config::RunConfig& cfg) {
  const std::string me = this_process();
  const std::string r = std::to_string(rank);
  // The first process to claim a RANK holds it; a second one is refused, naming the first.
  if (store.add(kPrefix + "claims/" + r, 1) > 1) {
    const std::string holder = text_of(store.get(kPrefix + "holder/" + r));
    // Before the run agreed, the group is refused with it (rank 0 names both processes); a run
    // that started already goes on, and only this process is refused.
    if (!store.check({kVerdictKey}))
      store.set(kDuplicateKey,
                bytes_of("RANK " + r + " was started twice (" + holder + ", and " + me + ")"));
    throw DuplicateRank(
        "config: RANK " + r + " is taken by another process (" + holder + "); this one is " + me +
        ": every process of a run needs its own RANK in [0, WORLD_SIZE) (with TRAINER_STORE_DIR, "
        "also a fresh directory per run)");
  }
  store.set(kPrefix + "holder/" + r, bytes_of(me));
  const std::string yaml = config::to_yaml(cfg), sha = sha256_hex(yaml);
  store.set(yaml_key(rank), bytes_of(yaml));
  store.set(
      rank_key(rank),
      bytes_of(nlohmann::json{{"world_size", world_size}, {"sha256", sha}, {"where", me}}.dump()));
  nlohmann::json verdict;
  if (rank == 0) {
    store.set(kWorldKey, bytes_of(std::to_string(world_size)));
    try {
      verdict = {{"error", rank0_verdict(store, world_size, cfg, sha)}, {"world_size", world_size}};
    } catch (const std::exception& e) {  // a rank that never came: the others learn it too
      store.set(kVerdictKey, bytes_of(nlohmann::json{
                                 {"error", std::string("rank 0: ") + e.what()},
                                 {"world_size", world_size},
                                 {"bad_input",
                                  false}}.dump()));
      throw;
    }
    store.set(kVerdictKey, bytes_of(verdict.dump()));
  } else {
    // Rank 0 waits for the others up to the store's timeout from its own arrival, which may be
    // after this rank's: wait for its verdict a margin longer.
    const auto timeout = store.timeout();
    report_another_world(store, rank, world_size, me, timeout);
    store.set_timeout(timeout +
                      std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(30)));
    try {
      verdict = nlohmann::json::parse(text_of(store.get(kVerdictKey)));
    } catch (...) {
      store.set_timeout(timeout);
      throw;
    }
    store.set_timeout(timeout);
  }
  const std::string error = verdict.at("error").get<std::string>();
  if (!error.empty()) {
    if (!verdict.value("bad_input", true)) throw std::runtime_error(error);
    throw config::ConfigError(error);
  }
  if (verdict.at("world_size").get<int>() != world_size)
    throw config::ConfigError("config: this rank (" + me + ", RANK " + r + ") has WORLD_SIZE " +
                              std::to_string(world_size) + ", rank 0 has " +
                              std::to_string(verdict.at("world_size").get<int>()) + "; " +
                              kHowToFix);
}

}  // namespace trainer::train

#pragma once
// One yes/no all ranks agree on, so that they all take the same branch (throw, or go on) before
// their next collective; and one text, or one refusal, rank 0 decides for all of them.
#include <cstdint>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/config/run_config.h"
#include "runtime/dist/comm.h"

namespace trainer::train {

// Whether any rank's `flag` is set (an all-reduce with max over `world`; null: this rank alone).
inline bool any_rank(dist::Comm* world, bool flag) {
  if (world == nullptr || world->size() == 1) return flag;
  int64_t f = flag ? 1 : 0;
  world->all_reduce(&f, 1, dist::CommDType::i64, dist::ReduceOp::max);
  return f != 0;
}

// `root`'s `text`, on every rank (the world comm: host memory; null: this rank's own).
inline void from_rank(dist::Comm* world, int root, std::string& text) {
  if (world == nullptr || world->size() == 1) return;
  int64_t n = static_cast<int64_t>(text.size());
  world->broadcast(&n, 1, dist::CommDType::i64, root);
  text.resize(static_cast<size_t>(n));
  if (n > 0) world->broadcast(text.data(), static_cast<size_t>(n), dist::CommDType::u8, root);
}

inline void from_rank0(dist::Comm* world, std::string& text) {
  from_rank(world, 0, text);
}

// The lowest rank whose `text` is not empty, and that text, on every rank (one all-reduce, and
// the text's broadcast when a rank has one); {-1, ""} when none has.
inline std::pair<int, std::string> first_rank_saying(dist::Comm* world, int rank,
                                                     std::string text) {
  if (world == nullptr || world->size() == 1) return {text.empty() ? -1 : rank, text};
  // (the max of -rank: the lowest rank that has one)
  int64_t first = text.empty() ? std::numeric_limits<int64_t>::min() : -int64_t{rank};
  world->all_reduce(&first, 1, dist::CommDType::i64, dist::ReduceOp::max);
  if (first == std::numeric_limits<int64_t>::min()) return {-1, ""};
  const int root = static_cast<int>(-first);
  from_rank(world, root, text);
  return {root, text};
}

// Runs `decide` on rank 0 alone (what it returns: rank 0's text, on every rank); a
// config::ConfigError it throws is thrown on every rank, with rank 0's message and key, and so is
// any other exception (rank 0 rethrows its own; the others a runtime_error naming rank 0), so that
// no rank waits on rank 0 in the broadcast it would otherwise skip.
template <class Decide>
std::string rank0_decides(dist::Comm* world, int rank, Decide&& decide) {
  // outcome: "" decided; "R" + the refused key + '\n' + the refusal; "F" + a failure
  std::string text, outcome;
  std::exception_ptr failure;
  if (rank == 0) try {
      text = decide();
    } catch (const config::ConfigError& e) {
      outcome = "R" + e.key + "\n" + e.what();
    } catch (const std::exception& e) {
      outcome = std::string("F") + e.what();
      failure = std::current_exception();
    }
  from_rank0(world, outcome);
  if (!outcome.empty() && outcome[0] == 'R') {
    const size_t end_of_key = outcome.find('\n');
    throw config::ConfigError(outcome.substr(end_of_key + 1), outcome.substr(1, end_of_key - 1));
  }
  if (failure) std::rethrow_exception(failure);
  if (!outcome.empty()) throw std::runtime_error("rank 0: " + outcome.substr(1));
  from_rank0(world, text);
  return text;
}

}  // namespace trainer::train

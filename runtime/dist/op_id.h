#pragma once
// OpId: which op of a communicator failed, for naming the rank behind it (failure_report.h).
// Every member issues the same collectives in the same order, so the n-th collective is the same
// op on all of them and the members' arrival marks are compared at it. Point-to-point transfers
// are not issued by every member: a pipeline's middle stage exchanges with both neighbours and
// the ends with one, and only the ends swap the tied embedding. They are counted apart, and a
// failed transfer is blamed on its peers. (Counted with the collectives, a stage's numbers
// drifted from its neighbours', and a timeout named healthy stages as missing.)
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dist/comm.h"

namespace trainer::dist {

struct OpId {
  uint64_t seq = 0;  // the n-th collective, or the n-th point-to-point batch
  bool p2p = false;
  std::vector<int> peers;  // a batch's peers: ranks in the group, sorted, without itself

  static OpId collective(uint64_t seq) { return {seq, false, {}}; }
  // "op #12", "transfer #7": how an error message names it
  std::string label() const { return (p2p ? "transfer #" : "op #") + std::to_string(seq); }
};

// The group ranks a batch exchanges with, other than `self` (a transfer to itself cannot fail
// on a peer).
inline std::vector<int> transfer_peers(const std::vector<P2pTransfer>& transfers, int self) {
  std::vector<int> peers;
  for (const P2pTransfer& t : transfers)
    if (t.bytes > 0 && t.peer != self) peers.push_back(t.peer);
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

// Numbers a communicator's ops as they are issued (one thread at a time).
class OpCounter {
 public:
  OpId next_collective() { return OpId::collective(collectives_++); }
  OpId next_transfer(std::vector<int> peers) { return {transfers_++, true, std::move(peers)}; }

 private:
  uint64_t collectives_ = 0;
  uint64_t transfers_ = 0;
};

}  // namespace trainer::dist

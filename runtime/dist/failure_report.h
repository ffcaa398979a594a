#pragma once
// Naming the rank behind a communicator failure, through the store. In order of preference:
//  1. ranks that reported their own death (report_failure: root key "failed/<global rank>");
//  2. the peer whose connection broke (gloo's message holds the peer's pair address, which every
//     rank published as "addr/<rank>" in the group store after connecting; an address nobody
//     published is the one member's that has not: it died before it could);
//  3. after a timeout in a collective: ranks that did not reach the op. Each failing rank marks
//     "arrived/<op seq>/<rank>"; members without the mark after a short grace did not arrive.
//     A point-to-point transfer is not every member's op (op_id.h): its peers did not arrive;
//  4. and where those are stuck: each rank that timed out publishes whom it waited for (root key
//     "waits_for/<global rank>"), and the chains from the missing ranks end at the ones that hung
//     or died (a rank blocked in a tp op on a hung peer never reaches the dp op we wait in);
//  5. a broken connection to a peer that timed out (root key "timed_out/<global rank>": gloo
//     closed the op's sockets then, and the peer closes the rest once it published whom it waited
//     for) is followed the same way, through that peer's chain; the rank publishes that it
//     waited for that peer, so chains through it go on to where the peer was stuck.
// Every failing rank marks its arrival at the op first, before anything that waits.
#include <functional>
#include <string>
#include <vector>

#include "runtime/dist/op_id.h"
#include "runtime/dist/store.h"

namespace trainer::dist {

struct FailureScope {
  Store* group_store;  // the communicator's (prefixed) store
  Store* root_store;   // unprefixed: where "failed/<global rank>" lives
  int rank;
  int size;
  std::function<int(int)> global_rank;
  double timeout_s;
  // Closes this rank's connections in the group; called once it has published whom it waited
  // for (4. above). A member that reached the op late is still blocked in it with us: it fails now
  // on the broken connection and follows our chain (5.), in time for the ranks waiting on it in
  // other groups, which otherwise give up on their chains before we exit and it finds out.
  std::function<void()> release_peers = {};
};

// addrs[j]: the address of this rank's end of its connection to member j (empty for itself).
void publish_pair_addresses(Store& group_store, int rank, const std::vector<std::string>& addrs);

// A sentence naming the failed or missing global rank(s) behind the failure of `op`, or "" when
// none can be named.
std::string name_failed_ranks(const FailureScope& scope, const OpId& op, const std::string& cause,
                              bool timed_out);

// "ranks that did not arrive: <missing (global ranks)>", and where they are stuck (4. above);
// publishes whom this rank waited for, then releases its peers (FailureScope::release_peers).
std::string name_missing_ranks(const FailureScope& scope, const std::vector<int>& missing);

// "300 s", "0.5 s": a timeout in a message.
std::string seconds_text(double s);

// What to say when the store failed while naming a rank (StoreLost: its server, rank 0, is gone).
std::string cannot_name(const std::exception& e);

// Whether `addr` ("[127.0.0.1]:1429") appears in `text` as a whole address, not as the start of
// a longer port ("[127.0.0.1]:14290"): how a transport error is matched to the peer it names.
bool mentions_address(const std::string& text, const std::string& addr);

}  // namespace trainer::dist

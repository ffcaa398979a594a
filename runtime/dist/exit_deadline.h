#pragma once
// The last resort after a collective failed: tearing down a device can hang a rank, because an
// NCCL kernel of another communicator may still spin on the dead peer and a cudaFree (in NCCL's
// abort or ours) waits for every kernel on the device. Armed at the failure, a deadline ends the
// process with an error if it is still alive then, so no rank hangs after it named the failure
// (PyTorch's NCCL heartbeat monitor does the same). The first arming wins; a process that tears
// down in time exits normally, with its own status and report.
#include <string>

namespace trainer::dist {

// Ends the process with exit status `code` `seconds` from now, logging `why`, unless it exited
// before. Later calls do nothing.
void arm_exit_deadline(double seconds, int code, const std::string& why);

// Whether a deadline is armed (for tests and logs).
bool exit_deadline_armed();

}  // namespace trainer::dist

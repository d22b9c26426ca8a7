// The flag steps every zero-copy collective runs around its copies (coll_zero_copy.cpp,
// zc_allreduce.cpp): an entry step that also compares each rank's call tag, and an exit step; on the
// host backend the same two steps as host waits. One set for every zero-copy path, so a call of one
// of them can follow a call of another on the same communicator (they share the sequence counters).
#pragma once
#include <cstdint>
#include <string>

#include "collectives/coll_launch.h"

namespace peerlink::coll {

struct CollState;

// Mixes v into the call tag h (what every rank must agree on: windows, offsets, shape).
uint64_t zc_mix(uint64_t h, uint64_t v);

// Host backend. Entry: every rank publishes its tag and waits for every peer; `bad` (this rank's own
// copies would leave a peer's window) still takes part with a tag no rank can match, so every rank
// learns of the violation in this call. Throws InvalidArgument on `bad` or a peer's other tag.
void zc_host_enter(CollState& st, uint64_t tag, const std::string& bad);
// A step with no data: every rank's copies before it landed, its reads are done.
void zc_host_step(CollState& st);

// The flag steps' arguments (entry and exit: one block of the shared protocol).
LaunchArgs zc_step_args(const CollState& st);

// GPU: a call whose copies would leave a peer's window. No copy is enqueued; the entry step alone
// runs, with a tag no peer matches, so the peers' kernels record the mismatch (and skip their exit
// wait) instead of waiting for us. Marks the collectives unusable and throws InvalidArgument(bad).
[[noreturn]] void zc_refuse(CollState& st, uint64_t tag, const std::string& bad, void* stream);

}  // namespace peerlink::coll

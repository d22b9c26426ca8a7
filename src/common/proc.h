// Process identity and liveness: a pid alone is reused by the kernel, so a process is identified by
// (pid, start time in clock ticks since boot) read from /proc/<pid>/stat.
#pragma once
#include <cstdint>
#include <sys/types.h>

namespace peerlink::common {

struct ProcId {
  int32_t pid = 0;
  uint64_t start_time = 0;
};

// Start time of `pid`, or 0 when it does not exist or is a zombie / dead.
uint64_t process_start_time(pid_t pid);
ProcId self_proc_id();
// True while the process identified by id runs (not exited, not a zombie, pid not reused).
bool process_alive(const ProcId& id);
// Now, in the unit of ProcId::start_time (clock ticks since boot, CLOCK_BOOTTIME as /proc uses).
uint64_t ticks_since_boot();

}  // namespace peerlink::common

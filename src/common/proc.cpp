#include "common/proc.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "common/format.h"

namespace peerlink::common {

uint64_t process_start_time(pid_t pid) {
  const std::string path = common::format("/proc/{}/stat", static_cast<int>(pid));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return 0;
  p += 2;
  char state = *p;
  if (state == 'Z' || state == 'X' || state == 'x') return 0;  // exited, not yet reaped
  // Fields after ')' start at field 3 (state); starttime is field 22.
  int field = 3;
  while (*p && field < 22) {
    if (*p == ' ') ++field;
    ++p;
  }
  if (field != 22) return 0;
  return std::strtoull(p, nullptr, 10);
}

ProcId self_proc_id() {
  ProcId id;
  id.pid = static_cast<int32_t>(getpid());
  id.start_time = process_start_time(getpid());
  return id;
}

bool process_alive(const ProcId& id) {
  if (id.pid <= 0) return false;
  uint64_t st = process_start_time(id.pid);
  return st != 0 && st == id.start_time;
}

uint64_t ticks_since_boot() {
  struct timespec ts {};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  const uint64_t hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  return static_cast<uint64_t>(ts.tv_sec) * hz + static_cast<uint64_t>(ts.tv_nsec) / (1000000000ULL / hz);
}

}  // namespace peerlink::common

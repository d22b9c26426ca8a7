// Named POSIX shared-memory segments (files under /dev/shm, mode 0600) with RAII ownership.
//
// Every segment starts with a one-page header naming its owner (pid + start time), so a segment
// left behind by a crashed process is recognised as stale and replaced. Creation is atomic: the
// creator builds the segment under a temporary name and link()s it into place, so an opener never
// sees a half-initialised segment.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/proc.h"

namespace peerlink::common {

struct SegmentHeader {
  uint64_t magic;           // kSegmentMagic
  uint64_t payload_bytes;   // bytes after the header page
  int32_t owner_pid;
  int32_t reserved;
  uint64_t owner_start;     // start time of the owner (liveness)
  uint64_t tag;             // creator-defined (e.g. job nonce)
};
constexpr uint64_t kSegmentMagic = 0x31534b4e494c5250ULL;  // "PRLINKS1"
constexpr size_t kSegmentHeaderBytes = 4096;
// Largest payload a segment may have: header + payload must fit off_t with room to spare, so no
// size computation on the way (header page, rounding, mmap length) can wrap.
constexpr uint64_t kMaxSegmentPayload = (uint64_t(1) << 62);

// Validates the header of a segment file: `bytes` are the first `n` bytes of the file (at least
// sizeof(SegmentHeader) are needed), `file_size` its size. Pure (no system calls): returns the
// header, or throws Error naming `name`, the magic and both sizes. The fuzz target drives it.
SegmentHeader parse_segment_header(const void* bytes, size_t n, uint64_t file_size, const std::string& name);

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates `name` with `payload_bytes` of zeroed payload, runs `init` on the payload before the
  // segment becomes visible. A stale segment of that name (owner dead) is replaced; one owned by a
  // live process makes this throw Error naming the name and the pid.
  static Segment create(const std::string& name, size_t payload_bytes, uint64_t tag,
                        const std::function<void(void*)>& init = nullptr);
  // Like create(), but returns an empty Segment (instead of throwing) when a live process already
  // owns a segment of that name: rendezvous uses it to join rather than create.
  static Segment try_create(const std::string& name, size_t payload_bytes, uint64_t tag,
                            const std::function<void(void*)>& init = nullptr);
  // Opens `name`; returns an empty Segment when it does not exist. Throws Error when the file is
  // not a valid peerlink segment (bad magic, truncated: the size it holds is checked).
  static Segment open(const std::string& name);

  // Rendezvous primitives: ownership is a shared flock held on the segment's file for as long as
  // the Segment lives (the kernel drops it when the process dies, so "nobody holds it" is an exact,
  // atomic staleness test). publish_locked() creates `name` only if it does not exist (O_EXCL via
  // link()), taking the lock on the file before the name appears; returns an empty Segment when
  // the name exists. adopt_fd() maps and validates an open fd and keeps it (and its locks).
  static Segment publish_locked(const std::string& name, size_t payload_bytes, uint64_t tag,
                                const std::function<void(void*)>& init);
  static Segment adopt_fd(int fd, const std::string& name);

  bool valid() const { return base_ != nullptr; }
  void* payload() const { return static_cast<char*>(base_) + kSegmentHeaderBytes; }
  size_t payload_bytes() const { return map_bytes_ - kSegmentHeaderBytes; }
  const SegmentHeader& header() const { return *static_cast<const SegmentHeader*>(base_); }
  const std::string& name() const { return name_; }
  bool owner_alive() const;

  // Inode of the mapped file (tells a replacement under the same name apart).
  uint64_t inode() const { return ino_; }
  // Removes the name (the mapping stays valid until destruction). Only removes it while the name
  // still refers to this segment, so a replacement made by someone else is never unlinked.
  void unlink();
  // When set, the destructor unlinks the name (creator's segments).
  void set_unlink_on_destroy(bool v) { unlink_on_destroy_ = v; }

 private:
  void reset();
  std::string name_;
  void* base_ = nullptr;
  size_t map_bytes_ = 0;
  uint64_t ino_ = 0;
  int fd_ = -1;  // kept open only by publish_locked / adopt_fd (its flock is the ownership)
  bool unlink_on_destroy_ = false;
};

// The system's file-name rules for segments, shared by creation and by every name read from SHM:
// 1..200 characters of [A-Za-z0-9_.-], starting with "pl_", no "/", not "." or "..".
bool valid_segment_name(const std::string& name);

// Unlinks every segment under /dev/shm whose name starts with `prefix` and whose owner is dead.
// Returns how many were removed.
int remove_stale_segments(const std::string& prefix);
// Names under /dev/shm starting with `prefix` (for tests and cleanup).
std::vector<std::string> list_segments(const std::string& prefix);

// "pl_<sanitized id>_<hash>": a file-name-safe, bounded-length prefix that carries the unique id.
std::string shm_prefix_for(const std::string& unique_id);

}  // namespace peerlink::common

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

  bool valid() const { return base_ != nullptr; }
  void* payload() const { return static_cast<char*>(base_) + kSegmentHeaderBytes; }
  size_t payload_bytes() const { return map_bytes_ - kSegmentHeaderBytes; }
  const SegmentHeader& header() const { return *static_cast<const SegmentHeader*>(base_); }
  const std::string& name() const { return name_; }
  bool owner_alive() const;

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
  bool unlink_on_destroy_ = false;
};

// Unlinks every segment under /dev/shm whose name starts with `prefix` and whose owner is dead.
// Returns how many were removed.
int remove_stale_segments(const std::string& prefix);
// Names under /dev/shm starting with `prefix` (for tests and cleanup).
std::vector<std::string> list_segments(const std::string& prefix);

// "pl_<sanitized id>_<hash>": a file-name-safe, bounded-length prefix that carries the unique id.
std::string shm_prefix_for(const std::string& unique_id);

}  // namespace peerlink::common

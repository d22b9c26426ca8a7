// The registered windows of one communicator (peerlink/windows.h; registration in windows.cpp):
// this rank's range and every peer's range mapped here, owned by the collectives state
// (coll_state.h) and released with it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/layout.h"
#include "gpu/backend.h"

namespace peerlink::detail { class CommServices; }

namespace peerlink::coll {

// A peer's range mapped here; releases the mapping when destroyed.
class PeerMapping {
 public:
  PeerMapping() = default;
  PeerMapping(detail::CommServices* svc, int peer, const gpu::MemHandle& h) : svc_(svc), peer_(peer), h_(h) {}
  PeerMapping(PeerMapping&& o) noexcept : svc_(o.svc_), peer_(o.peer_), h_(o.h_) { o.svc_ = nullptr; }
  PeerMapping& operator=(PeerMapping&& o) noexcept;
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;
  ~PeerMapping() { reset(); }
  void reset() noexcept;

 private:
  detail::CommServices* svc_ = nullptr;
  int peer_ = -1;
  gpu::MemHandle h_;
};

struct Window {
  uint64_t id = 0;
  char* base = nullptr;  // this rank's range
  size_t bytes = 0;
  bool zero_copy = false;  // every rank exported its range and this rank mapped them all
  char* peer_base[kMaxRanks] = {};  // [rank]: that rank's range, mapped here ([own] = base)
  size_t peer_bytes[kMaxRanks] = {};
  PeerMapping maps[kMaxRanks];
  // "" when [at, +len) of rank `peer`'s range lies inside what that rank registered; else why not,
  // naming the window and the range (`verb`: "write" or "read"). The zero-copy paths check every
  // range with it before anything moves.
  std::string outside(int peer, size_t at, size_t len, const char* verb) const;
  bool contains(const void* p, size_t n) const {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
    return a >= b && a - b <= bytes && n <= bytes - (a - b);
  }
};

struct CollState;
// Registers [ptr, +bytes) on every rank as one window (collective; windows.cpp). The caller holds
// the call lock (CollState::lock_calls) and keeps the result; `who` names it in logs and errors.
Window register_range(CollState& st, void* ptr, size_t bytes, const char* who);

struct WindowTable {
  uint64_t next_id = 1;  // ids advance alike on every rank (registration is collective)
  std::vector<Window> wins;
  // The window holding [p, p+n), or nullptr.
  const Window* find(const void* p, size_t n) const {
    for (const Window& w : wins)
      if (w.contains(p, n)) return &w;
    return nullptr;
  }
};

}  // namespace peerlink::coll

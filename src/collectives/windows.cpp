// register_window / deregister_window / window_zero_copy (peerlink/windows.h): every rank exports
// its range, the records travel through the bootstrap allgather (untrusted: window_record.h), and
// each rank maps the others' ranges once (register_range, shared with the windows that captured
// collectives make for themselves: graph_windows.cpp). The zero-copy collectives that use them are
// in coll_zero_copy.cpp.
#include <memory>

#include "collectives/coll_state.h"
#include "collectives/window_record.h"
#include "common/format.h"
#include "common/log.h"
#include "config/test_hooks.h"
#include "peerlink/errors.h"
#include "peerlink/windows.h"
#include "transport/services.h"

namespace peerlink {
namespace coll {

static_assert(sizeof(WindowRecord) <= Communicator::kMaxAllgatherBytes, "allgather slot");

namespace {

// This rank's record of window w: its range exported, or marked not exportable (memory the backend
// cannot export: a window without zero-copy).
WindowRecord local_window_record(CollState& st, const Window& w, const char* who) {
  WindowRecord mine;
  mine.rank = st.rank();
  mine.id = w.id;
  mine.bytes = w.bytes;
  try {
    size_t off = 0;
    mine.handle = st.svc().export_memory(w.base, w.bytes, &off);
    mine.offset = off;
    mine.exported = 1;
  } catch (const Error& e) {
    mine.handle = gpu::MemHandle{};
    mine.offset = 0;
    mine.exported = 0;
    common::log_line(LogLevel::Info, st.svc().options().log_level,
                     common::format("{} (rank {}): window {} [{}, +{}) is not exportable, no zero-copy path: {}", who,
                                    st.rank(), w.id, static_cast<const void*>(w.base), w.bytes, e.what()));
  }
  return mine;
}

// Maps every peer's range of w (whose records passed their parser); "" when all are mapped, else
// why not. Not thrown on: the peers learn the failure from the status exchange instead of waiting.
std::string map_peer_ranges(CollState& st, Window& w, const WindowRecord* all, const char* who) {
  detail::CommServices& svc = st.svc();
  try {
    if (detail::test_hooks(svc.options()).window_map_fail) throw Error("mapping refused (PEERLINK_TEST_WINDOW_MAP_FAIL)");
    for (int p = 0; p < st.world(); ++p) {
      if (p == st.rank()) continue;
      gpu::MemHandle h;
      char* base = open_peer_checked(svc, p, all[p].handle, &h, who);
      w.maps[p] = PeerMapping(&svc, p, h);
      w.peer_base[p] = base + all[p].offset;
      w.peer_bytes[p] = all[p].bytes;
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Every rank exports [ptr, +bytes), the records travel through the allgather, every rank maps the
// others' ranges and all agree on zero-copy (a second allgather of the mapping statuses). Collective;
// the caller holds the call lock (CollState::lock_calls). `who` names the caller in logs and errors.
Window register_range(CollState& st, void* ptr, size_t bytes, const char* who) {
  detail::CommServices& svc = st.svc();
  gpu::DeviceGuard dg(st.host() ? -1 : st.device());
  Window w;
  w.id = st.windows().next_id;
  w.base = static_cast<char*>(ptr);
  w.bytes = bytes;
  const WindowRecord mine = local_window_record(st, w, who);
  std::unique_ptr<WindowRecord[]> all(new WindowRecord[st.world()]);
  svc.allgather(&mine, sizeof mine, all.get());
  WindowExpect expect;
  expect.id = w.id;
  expect.host = st.host();
  bool every = true;
  for (int p = 0; p < st.world(); ++p) {
    all[p] = parse_window_record(&all[p], sizeof(WindowRecord), p, expect);
    every = every && all[p].exported == 1;
  }
  st.windows().next_id++;  // the exchange happened on every rank: ids stay in step from here
  w.peer_base[st.rank()] = w.base;
  w.peer_bytes[st.rank()] = bytes;
  const std::string map_error = every ? map_peer_ranges(st, w, all.get(), who) : "";
  // Every rank reports whether it mapped every range, and none returns before all did: a rank may
  // deregister and free its range right after the call (a peer still fetching that export would
  // fail), and all agree on the zero-copy path (its tags must match on every rank). Statuses come
  // from peers: anything but 1 counts as a failure.
  const uint32_t mapped = every && map_error.empty() ? 1u : 0u;
  std::unique_ptr<uint32_t[]> statuses(new uint32_t[st.world()]);
  svc.allgather(&mapped, sizeof mapped, statuses.get());
  std::string failed;
  for (int p = 0; p < st.world(); ++p)
    if (statuses[p] != 1u) failed += common::format("{}{}", failed.empty() ? "" : ", ", p);
  w.zero_copy = every && failed.empty();
  if (every && !w.zero_copy) {
    for (int p = 0; p < st.world(); ++p) {
      if (p == st.rank()) continue;
      w.maps[p].reset();
      w.peer_base[p] = nullptr;
      w.peer_bytes[p] = 0;
    }
    common::log_line(
        LogLevel::Warn, svc.options().log_level,
        common::format("{} (rank {}): window {} has no zero-copy path: rank(s) {} could not map every peer's range{}",
                       who, st.rank(), w.id, failed,
                       map_error.empty() ? std::string() : common::format(" (here: {})", map_error)));
  }
  common::log_line(
      LogLevel::Info, svc.options().log_level,
      common::format("{} (rank {}): window {} [{}, +{}) {}", who, st.rank(), w.id, ptr, bytes,
                     w.zero_copy ? "zero-copy capable (every rank's range mapped)"
                                 : "registered without zero-copy (a rank could not export or map a range)"));
  return w;
}

}  // namespace coll

uint64_t register_window(Communicator& comm, void* ptr, size_t bytes) {
  if (!ptr || bytes == 0)
    throw InvalidArgument(common::format("register_window: ptr {} and {} bytes (need a non-null range)", ptr, bytes));
  auto call = detail::services(comm).begin("register_window");
  coll::CollState& st = coll::coll_state(comm);
  auto g = st.lock_calls();
  coll::check_collective_error(st);
  for (const coll::Window& w : st.windows().wins) {
    auto a = reinterpret_cast<uintptr_t>(ptr), b = reinterpret_cast<uintptr_t>(w.base);
    if (a < b + w.bytes && b < a + bytes)
      throw InvalidArgument(common::format("register_window: [{}, +{}) overlaps window {} [{}, +{})", ptr, bytes, w.id,
                                           static_cast<void*>(w.base), w.bytes));
  }
  coll::Window w = coll::register_range(st, ptr, bytes, "register_window");
  const uint64_t id = w.id;
  st.windows().wins.push_back(std::move(w));
  return id;
}

void deregister_window(Communicator& comm, uint64_t id) {
  auto call = detail::services(comm).begin("deregister_window");
  std::shared_ptr<coll::CollState> st = coll::coll_state_if_set(comm);
  auto unknown = [&] { return InvalidArgument(common::format("deregister_window: window {} is not registered", id)); };
  if (!st) throw unknown();
  auto g = st->lock_calls();
  auto& wins = st->windows().wins;
  for (auto it = wins.begin(); it != wins.end(); ++it) {
    if (it->id != id) continue;
    gpu::DeviceGuard dg(st->host() ? -1 : st->device());
    // The last collective may still write the peers' windows through the mappings about to close.
    if (!st->wait_last_launch())
      throw TimeoutError(common::format("deregister_window (rank {}): the last collective did not finish within {} ms",
                                        st->rank(), st->svc().options().timeout.count()));
    wins.erase(it);  // PeerMapping releases the peers' ranges
    return;
  }
  throw unknown();
}

bool window_zero_copy(Communicator& comm, const void* ptr, size_t bytes) {
  auto call = detail::services(comm).begin("window_zero_copy");
  std::shared_ptr<coll::CollState> st = coll::coll_state_if_set(comm);
  if (!st) return false;
  auto g = st->lock_calls();
  const coll::Window* w = st->windows().find(ptr, bytes);
  return w && w->zero_copy;
}

}  // namespace peerlink

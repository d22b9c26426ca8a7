// A hostile peer publishes forged buffer handles (IPC manager): rank 1 publishes a real
// receive buffer to rank 0, then rewrites that registry record so its handle names
//   (a) the victim's own private allocation, or its own allocation exported to rank 2,
//   (b) owner pid = the victim's pid with an arbitrary owner_base (the same-process shortcut),
//   (c) rank 2's real allocation.
// The victim's send_direct must fail with a typed Error before any byte moves: canaries in the
// victim's allocations, rank 2's buffer and the hostile rank's own buffer stay intact, and a
// legitimate send afterwards still works. Host backend, direct path, three forked ranks.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/proc.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"
#include "transport/registry.h"

using namespace peerlink;
using namespace std::chrono;
using pltest::run_ranks;

namespace {

constexpr size_t kBytes = 4096, kMsg = 256;
constexpr uint32_t kForgedBase = 40, kLegit = 60;
constexpr int kCases = 5;

struct Alloc {  // what a rank tells the hostile one about an allocation of its own
  int32_t pid;
  uint64_t start;
  uint64_t base;
  uint64_t id;
  char name[64];
};
struct SharedCtl {
  Alloc victim_priv, victim_exported, third;
  uint64_t hostile_buf;
};

// The /dev/shm name of the mapping that holds p, and its allocation id ("..._m<id>").
Alloc describe(void* p) {
  Alloc a{};
  common::ProcId me = common::self_proc_id();
  a.pid = me.pid;
  a.start = me.start_time;
  a.base = reinterpret_cast<uint64_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream is(line);
    std::string range, perms, off, dev, inode, path;
    is >> range >> perms >> off >> dev >> inode >> path;
    size_t dash = range.find('-');
    uint64_t lo = std::stoull(range.substr(0, dash), nullptr, 16), hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (a.base < lo || a.base >= hi || path.rfind("/dev/shm/", 0) != 0) continue;
    std::string name = path.substr(9);
    std::snprintf(a.name, sizeof a.name, "%s", name.c_str());
    a.id = std::stoull(name.substr(name.rfind("_m") + 2));
    return a;
  }
  throw std::runtime_error("no /dev/shm mapping holds the allocation");
}

// The registry slot of this rank's publication of `buf_id` at `base` (found in its own mappings of
// peerlink segments, so the test needs no knowledge of where the pair segment keeps its table).
detail::RegSlot* find_slot(uint32_t buf_id, uint64_t base) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/pl_") == std::string::npos) continue;
    std::istringstream is(line);
    std::string range, perms;
    is >> range >> perms;
    if (perms.size() < 2 || perms[1] != 'w') continue;
    size_t dash = range.find('-');
    char* lo = reinterpret_cast<char*>(std::stoull(range.substr(0, dash), nullptr, 16));
    char* hi = reinterpret_cast<char*>(std::stoull(range.substr(dash + 1), nullptr, 16));
    for (char* p = lo; p + sizeof(detail::RegSlot) <= hi; p += 8) {
      auto* s = reinterpret_cast<detail::RegSlot*>(p);
      if (s->buf_id == buf_id && s->used.load() == detail::kRegPublished && s->version == 1 &&
          s->handle.kind == gpu::HandleKind::HostShm && s->handle.owner_base == base)
        return s;
    }
  }
  return nullptr;
}

gpu::MemHandle handle_of(const Alloc& a) {
  gpu::MemHandle h;
  h.kind = gpu::HandleKind::HostShm;
  h.owner_pid = a.pid;
  h.owner_start = a.start;
  h.alloc_id = a.id;
  h.alloc_bytes = kBytes;
  h.owner_base = a.base;
  std::memcpy(h.data, a.name, std::min(sizeof h.data - 1, std::strlen(a.name)));
  return h;
}

}  // namespace

TEST(MpForgedHandle, VictimRejectsForeignOrForgedHandlesAndWritesNothing) {
  const std::string uid = pltest::unique_test_id("forged");
  auto* ctl = static_cast<SharedCtl*>(
      mmap(nullptr, sizeof(SharedCtl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(ctl, MAP_FAILED);
  new (ctl) SharedCtl{};
  std::string fails = run_ranks(3, [&](int rank) {
    Options o;
    o.timeout = milliseconds(10000);
    o.path = Path::Direct;
    o.host_fd = false;  // the forgeries are SHM segment names (descriptor handles: FdPassing* tests)
    Communicator comm(uid, rank, 3, kHostDevice, o);
    char* buf = static_cast<char*>(comm.alloc(kBytes));
    pltest::fill_pattern(buf, kBytes, 100 + rank);
    char* priv = nullptr;
    if (rank == 0) {  // victim
      priv = static_cast<char*>(comm.alloc(kBytes));
      pltest::fill_pattern(priv, kBytes, 200);
      comm.notify_ipc_buffer(2, 1, buf, kBytes, 1);  // `buf` is exported (to rank 2), `priv` never
      ctl->victim_priv = describe(priv);
      ctl->victim_exported = describe(buf);
    } else if (rank == 2) {
      comm.notify_ipc_buffer(1, 1, buf, kBytes, 1);  // exported to rank 1: it could learn the handle
      ctl->third = describe(buf);
    } else {
      for (uint32_t i = 0; i < kCases; ++i) comm.notify_ipc_buffer(0, kForgedBase + i, buf, kBytes, 1);
      ctl->hostile_buf = reinterpret_cast<uint64_t>(buf);
    }
    comm.barrier();  // every description is written

    if (rank == 1) {  // forge: rewrite each record's handle, keeping buffer id, version, range
      std::vector<gpu::MemHandle> forged(kCases);
      forged[0] = handle_of(ctl->victim_priv);                             // (a) private allocation
      forged[1] = handle_of(ctl->victim_exported);                         // (a) own exported allocation
      forged[2] = handle_of(ctl->victim_priv);                             // (b) victim pid, any base
      forged[2].owner_base = ctl->victim_priv.base + 512;
      forged[3] = handle_of(ctl->victim_exported);                         // (b) victim pid, wrong size
      forged[3].alloc_bytes = 1 << 20;
      forged[4] = handle_of(ctl->third);                                   // (c) rank 2's allocation
      for (uint32_t i = 0; i < kCases; ++i) {
        detail::RegSlot* s = find_slot(kForgedBase + i, ctl->hostile_buf);
        MP_CHECK_MSG(s, "registry slot of buffer " << kForgedBase + i << " not found");
        detail::registry_write(s, detail::Publication{kForgedBase + i, 1, 0, kBytes, forged[i]});
      }
    }
    comm.barrier();  // forged records are in place

    if (rank == 0) {
      std::vector<char> src(kMsg, 0x6b);
      for (uint32_t i = 0; i < kCases; ++i) {
        try {
          comm.send_direct(1, src.data(), kMsg, kForgedBase + i, 1);
          MP_CHECK_MSG(false, "forged handle " << i << " was accepted");
        } catch (const InvalidArgument& e) {
          MP_CHECK_MSG(false, "case " << i << ": a forged record is not the caller's mistake: " << e.what());
        } catch (const Error& e) {
          MP_CHECK_MSG(std::string(e.what()).find("rejected") != std::string::npos, "case " << i << ": " << e.what());
        }
      }
      MP_CHECK_MSG(pltest::check_pattern(priv, kBytes, 200) == SIZE_MAX, "private allocation was written");
      MP_CHECK_MSG(pltest::check_pattern(buf, kBytes, 100) == SIZE_MAX, "exported allocation was written");
    }
    comm.barrier();  // the victim has tried every forged handle
    if (rank != 0)
      MP_CHECK_MSG(pltest::check_pattern(buf, kBytes, 100 + rank) == SIZE_MAX, "rank " << rank << "'s buffer was written");

    // The victim keeps working with the legitimate publication of the same peer.
    Request r;
    if (rank == 1) {
      comm.notify_ipc_buffer(0, kLegit, buf, kBytes, 1);
      r = comm.irecv(0, kLegit, 1024, kMsg);
    }
    comm.barrier();
    if (rank == 0) {
      std::vector<char> src(kMsg);
      pltest::fill_pattern(src.data(), kMsg, 7);
      comm.send_direct(1, src.data(), kMsg, kLegit, 1, 1024);
    }
    if (rank == 1) {
      r.wait();
      MP_CHECK(pltest::check_pattern(buf + 1024, kMsg, 7) == SIZE_MAX);
      MP_CHECK(pltest::check_pattern(buf, 1024, 101) == SIZE_MAX);
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
  munmap(ctl, sizeof(SharedCtl));
}

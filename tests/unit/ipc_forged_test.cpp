// Forged IPC handles (a hostile peer's registry record) must never become a raw pointer or a
// mapping of the wrong allocation. Unit level: two ranks' IpcManagers in one process, so the
// same-process shortcut (owner pid == ours) is what is under test; the fork-based end-to-end
// version is MpForgedHandle in tests/mp/forged_handle_test.cpp.
#include <gtest/gtest.h>

#include <cstring>

#include "gpu/backend.h"
#include "peerlink/errors.h"
#include "support/mp.h"
#include "transport/ipc_manager.h"

using namespace peerlink;
using namespace peerlink::detail;

namespace {

void expect_rejected(IpcManager& m, int peer, const Publication& p, const char* what) {
  try {
    m.bind(peer, p);
    ADD_FAILURE() << what << ": forged handle accepted";
  } catch (const InvalidArgument& e) {
    ADD_FAILURE() << what << ": InvalidArgument is for the caller's mistakes: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rejected"), std::string::npos) << what << ": " << e.what();
  }
}

}  // namespace

TEST(IpcForged, InProcessHandleMustNameARealExportOfThatPeer) {
  const std::string job = common::shm_prefix_for(pltest::unique_test_id("forge"));
  auto be0 = gpu::make_backend(-1, job + "r0_");
  auto be1 = gpu::make_backend(-1, job + "r1_");
  const common::ProcId self = common::self_proc_id();
  IpcManager rank0(*be0, self, 0), rank1(*be1, self, 1);
  char* a = static_cast<char*>(be0->alloc(4096));      // rank 0 exports it to rank 1
  char* priv = static_cast<char*>(be1->alloc(4096));   // rank 1's private allocation
  char* mine = static_cast<char*>(be1->alloc(4096));   // rank 1's exported allocation
  std::memset(priv, 0x5a, 4096);
  uint64_t off = 0;
  gpu::MemHandle h = rank0.export_range(a, 4096, &off);
  gpu::MemHandle own = rank1.export_range(mine, 4096, &off);

  Binding ok = rank1.bind(0, Publication{1, 1, 64, 128, h});  // the legitimate case
  EXPECT_EQ(ok.ptr, a + 64);

  gpu::MemHandle f = h;  // (b) owner pid = ours, arbitrary base
  f.owner_base = reinterpret_cast<uint64_t>(priv);
  expect_rejected(rank1, 0, Publication{2, 1, 0, 4096, f}, "arbitrary base");
  f = h;  // right base, wrong size (a larger allocation than exported)
  f.alloc_bytes = 1 << 20;
  expect_rejected(rank1, 0, Publication{3, 1, 0, 1 << 20, f}, "wrong size");
  f = h;
  f.alloc_id += 7;
  expect_rejected(rank1, 0, Publication{4, 1, 0, 4096, f}, "wrong allocation id");
  // (a) the victim's own allocations: exported ones are still never a peer's buffer
  expect_rejected(rank1, 0, Publication{5, 1, 0, 4096, own}, "own exported allocation");
  // (c) rank 0's allocation sent by rank 2
  expect_rejected(rank1, 2, Publication{6, 1, 0, 4096, h}, "another rank's allocation");
  // A freed (forgotten) export is not an allocation any more.
  char* gone = static_cast<char*>(be0->alloc(4096));
  gpu::MemHandle hg = rank0.export_range(gone, 4096, &off);
  rank0.forget_export(gone);
  expect_rejected(rank1, 0, Publication{7, 1, 0, 4096, hg}, "freed export");
  be0->free(gone);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(static_cast<unsigned char>(priv[i]), 0x5a) << i;
  ok = Binding();
  rank1.close_all();
  rank0.close_all();
  be0->free(a);
  be1->free(priv);
  be1->free(mine);
}

// Cross-process handles: the host backend opens only allocations of the rank the handle came from,
// and a cached mapping is never reused for a handle that describes its allocation differently.
TEST(IpcForged, CrossProcessHandleIsCheckedAgainstTheSender) {
  const std::string job = common::shm_prefix_for(pltest::unique_test_id("forgex"));
  auto be0 = gpu::make_backend(-1, job + "r0_");
  auto be1 = gpu::make_backend(-1, job + "r1_");
  auto be2 = gpu::make_backend(-1, job + "r2_");
  IpcManager rank0(*be0, common::ProcId{1, 1}, 0);  // "other processes": real opens happen
  IpcManager rank2(*be2, common::ProcId{2, 2}, 2);
  IpcManager victim(*be1, common::self_proc_id(), 1);
  char* a = static_cast<char*>(be0->alloc(4096));
  char* t = static_cast<char*>(be2->alloc(4096));
  uint64_t off = 0;
  gpu::MemHandle h0 = rank0.export_range(a, 4096, &off);
  gpu::MemHandle h2 = rank2.export_range(t, 4096, &off);
  // (c) rank 2's real allocation, sent by rank 0
  expect_rejected(victim, 0, Publication{1, 1, 0, 4096, h2}, "third rank's allocation");
  EXPECT_NO_THROW(victim.bind(2, Publication{2, 1, 0, 4096, h2}));  // from rank 2 itself: fine
  Binding b = victim.bind(0, Publication{3, 1, 0, 64, h0});
  gpu::MemHandle bigger = h0;  // same allocation key, larger size: the cached mapping is 4096 bytes
  bigger.alloc_bytes = 1 << 20;
  expect_rejected(victim, 0, Publication{4, 1, 1 << 19, 64, bigger}, "cached mapping, other size");
  EXPECT_THROW(victim.acquire(0, bigger), Error);
  b = Binding();
  victim.close_all();
  be0->free(a);
  be2->free(t);
}

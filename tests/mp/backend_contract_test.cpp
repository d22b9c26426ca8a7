// Contract tests run on whatever backend PEERLINK_TEST_DEVICES names (comma-separated device per
// rank, cycled; default "-1" = host memory). CI runs them on the host backend; scripts/gpu_check.sh
// runs them with "0,0" (two processes on one GPU) and "0,1" (one process per GPU).
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <thread>

#include "peerlink/peerlink.h"
#include "support/mp.h"
#include "support/test_devices.h"
#include "transport/services.h"

using namespace peerlink;
using pltest::run_ranks;
using namespace std::chrono;

namespace {

using pltest::device_of;
using pltest::test_devices;

// Host staging for device buffers: the tests fill and check through the backend's copies.
void put(Communicator& c, void* dst, const void* src, size_t n) { peerlink::detail::services(c).backend().copy_sync(dst, src, n); }
std::vector<char> get(Communicator& c, const void* src, size_t n) {
  std::vector<char> h(n);
  if (n) peerlink::detail::services(c).backend().copy_sync(h.data(), src, n);
  return h;
}
void fill(Communicator& c, void* dst, size_t n, uint64_t tag) {
  std::vector<char> h(n);
  pltest::fill_pattern(h.data(), n, tag);
  put(c, dst, h.data(), n);
}
size_t check(Communicator& c, const void* p, size_t n, uint64_t tag) {
  auto h = get(c, p, n);
  return pltest::check_pattern(h.data(), n, tag);
}

Options opts(Completion comp = Completion::Auto, Path path = Path::Auto) {
  Options o;
  o.timeout = milliseconds(30000);
  o.completion = comp;
  o.path = path;
  return o;
}

struct Case {
  Completion comp;
  Path path;
};

class ContractPaths : public testing::TestWithParam<Case> {};

// Random sizes (1 B .. 3 MB, and one 40 MB message that is striped / pipelined) at random offsets.
TEST_P(ContractPaths, RandomSizesVerified) {
  const Case c = GetParam();
  const std::string uid = pltest::unique_test_id("contract");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts(c.comp, c.path);
    o.relay_chunk_bytes = 1 << 20;
    o.stripe_threshold = 4 << 20;
    o.stripe_streams = 2;  // the striped path (one lane by default)
    Communicator comm(uid, rank, 2, device_of(rank), o);
    const size_t kBuf = 48 << 20;
    const int peer = 1 - rank;
    char* buf = static_cast<char*>(comm.alloc(kBuf));
    char* src = static_cast<char*>(comm.alloc(kBuf));
    comm.notify_ipc_buffer(peer, 5, buf, kBuf, 1);
    comm.wait_ipc_buffer(peer, 5, 1);
    for (int k = 0; k < 12; ++k) {
      std::mt19937_64 g(k * 31 + 7);
      size_t len = k == 11 ? (40 << 20) + 3 : (k % 4 == 0 ? 1 + g() % 9 : 1 + g() % (3 << 20));
      size_t off = g() % (kBuf - len + 1);
      uint64_t version = (k % 3 == 1) ? 0 : 1;
      Request r = comm.irecv(peer, 5, off, len);
      fill(comm, src, len, uint64_t(rank) << 20 | k);
      comm.isend(peer, src, len, 5, off, version).wait();
      r.wait();
      size_t bad = check(comm, buf + off, len, uint64_t(peer) << 20 | k);
      MP_CHECK_MSG(bad == SIZE_MAX, "message " << k << " (" << len << " bytes) wrong at " << bad);
      comm.barrier();
    }
    comm.free(buf);
    comm.free(src);
    comm.barrier();
  }, milliseconds(120000));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}
INSTANTIATE_TEST_SUITE_P(Backend, ContractPaths,
                         testing::Values(Case{Completion::DoneSeq, Path::Auto}, Case{Completion::Ring, Path::Auto},
                                         Case{Completion::Auto, Path::Relay}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return std::string(to_string(i.param.comp)) + "_" + to_string(i.param.path);
                         });

TEST(ContractFifo, ThousandInFlightOrdered) {
  const std::string uid = pltest::unique_test_id("cfifo");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, device_of(rank), opts());
    const int n = 1200;
    const size_t msg = 40;
    char* buf = static_cast<char*>(comm.alloc(n * msg));
    if (rank == 1) {
      comm.notify_ipc_buffer(0, 1, buf, n * msg, 1);
      comm.barrier();
      comm.barrier();
      std::vector<Request> rs;
      for (int k = 0; k < n; ++k) rs.push_back(comm.irecv(0, 1, k * msg, msg));
      for (auto& r : rs) r.wait();
      auto h = get(comm, buf, n * msg);
      for (int k = 0; k < n; ++k) MP_CHECK_MSG(pltest::check_pattern(&h[k * msg], msg, k) == SIZE_MAX, "message " << k);
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      std::vector<char> h(n * msg);
      for (int k = 0; k < n; ++k) pltest::fill_pattern(&h[k * msg], msg, k);
      put(comm, buf, h.data(), n * msg);
      std::vector<Request> ss;
      for (int k = 0; k < n; ++k) ss.push_back(comm.isend(1, buf + k * msg, msg, 1, k * msg, 1));
      comm.barrier();
      for (auto& s : ss) s.wait();
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

// Small sends (GPU: armed kernels, gpu/armed_lane.h) and large ones (copy engines) in flight
// together on one pair, with pauses shorter and longer than the arm window (a waiting kernel is
// rung, or cancelled and replaced): every payload lands, in order, at its own slot.
TEST(ContractFifo, SmallAndLargeInterleavedWithPauses) {
  const std::string uid = pltest::unique_test_id("cmix");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts(Completion::DoneSeq);
    o.host_arm_us = 40;
    Communicator comm(uid, rank, 2, device_of(rank), o);
    const size_t kSlot = (1 << 20) + 64, kSlots = 8;
    const size_t sizes[] = {8, 16384, 3, 16385, (1 << 20) + 5, 100, 12288, 1};
    const int pauses_us[] = {0, 0, 30, 150, 0, 5};
    char* buf = static_cast<char*>(comm.alloc(kSlot * kSlots));
    const int peer = 1 - rank;
    comm.notify_ipc_buffer(peer, 3, buf, kSlot * kSlots, 1);
    comm.wait_ipc_buffer(peer, 3, 1);
    std::mt19937 g(11);
    for (int round = 0; round < 24; ++round) {
      std::vector<size_t> len(kSlots);
      for (size_t j = 0; j < kSlots; ++j) len[j] = sizes[(round * 3 + j) % std::size(sizes)];
      const uint64_t tag0 = uint64_t(round) * kSlots;
      if (rank == 0) {
        std::vector<char> h(kSlot * kSlots);
        for (size_t j = 0; j < kSlots; ++j) pltest::fill_pattern(&h[j * kSlot], len[j], tag0 + j);
        put(comm, buf, h.data(), h.size());
        std::vector<Request> ss;
        for (size_t j = 0; j < kSlots; ++j) {
          ss.push_back(comm.isend(1, buf + j * kSlot, len[j], 3, j * kSlot, 1));
          std::this_thread::sleep_for(microseconds(pauses_us[g() % std::size(pauses_us)]));
        }
        for (auto& s : ss) s.wait();
      } else {
        std::vector<Request> rs;
        for (size_t j = 0; j < kSlots; ++j) rs.push_back(comm.irecv(0, 3, j * kSlot, len[j]));
        for (auto& r : rs) r.wait();
        auto h = get(comm, buf, kSlot * kSlots);
        for (size_t j = 0; j < kSlots; ++j)
          MP_CHECK_MSG(pltest::check_pattern(&h[j * kSlot], len[j], tag0 + j) == SIZE_MAX,
                       "round " << round << " message " << j << " (" << len[j] << " bytes)");
      }
      comm.barrier();  // the receiver checked the round before the sender reuses the slots
    }
    comm.free(buf);
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// More small sends in flight than the armed lane has slots (gpu/armed_lane.h: 16), back to back:
// the host waits for the lane to free a slot, one kernel serves them in order, every payload lands.
TEST(ContractFifo, SmallSendsBeyondTheArmedLaneSlots) {
  const std::string uid = pltest::unique_test_id("cburst");
  std::string fails = run_ranks(2, [&](int rank) {
    Options o = opts(Completion::DoneSeq);
    o.host_arm_us = 50;
    Communicator comm(uid, rank, 2, device_of(rank), o);
    constexpr size_t kSlot = 4096, kMsgs = 57;
    char* buf = static_cast<char*>(comm.alloc(kSlot * kMsgs));
    const int peer = 1 - rank;
    comm.notify_ipc_buffer(peer, 4, buf, kSlot * kMsgs, 1);
    comm.wait_ipc_buffer(peer, 4, 1);
    for (int round = 0; round < 6; ++round) {
      const uint64_t tag0 = uint64_t(round) * kMsgs + 1000;
      auto len = [&](size_t j) { return 1 + (j * 977 + size_t(round) * 131) % kSlot; };
      if (rank == 0) {
        std::vector<char> h(kSlot * kMsgs);
        for (size_t j = 0; j < kMsgs; ++j) pltest::fill_pattern(&h[j * kSlot], len(j), tag0 + j);
        put(comm, buf, h.data(), h.size());
        std::vector<Request> ss;
        for (size_t j = 0; j < kMsgs; ++j) ss.push_back(comm.isend(1, buf + j * kSlot, len(j), 4, j * kSlot, 1));
        for (auto& s : ss) s.wait();
      } else {
        std::vector<Request> rs;
        for (size_t j = 0; j < kMsgs; ++j) rs.push_back(comm.irecv(0, 4, j * kSlot, len(j)));
        for (auto& r : rs) r.wait();
        auto h = get(comm, buf, kSlot * kMsgs);
        for (size_t j = 0; j < kMsgs; ++j)
          MP_CHECK_MSG(pltest::check_pattern(&h[j * kSlot], len(j), tag0 + j) == SIZE_MAX,
                       "round " << round << " message " << j << " (" << len(j) << " bytes)");
      }
      comm.barrier();
    }
    comm.free(buf);
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

TEST(ContractVersions, RebindClosesOldMappingOpensOnce) {
  const std::string uid = pltest::unique_test_id("cver");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, device_of(rank), opts());
    if (rank == 1) {
      char* a = static_cast<char*>(comm.alloc(1 << 20));
      char* b = static_cast<char*>(comm.alloc(1 << 20));
      comm.notify_ipc_buffer(0, 2, a + 4096, 8192, 1);
      comm.notify_ipc_buffer(0, 3, a + 65536, 8192, 1);  // slice of the same allocation
      MP_CHECK(comm.stats().exports == 1);
      comm.irecv(0, 2, 0, 8192).wait();
      comm.irecv(0, 3, 0, 8192).wait();
      comm.notify_ipc_buffer(0, 2, b, 8192, 2);
      comm.notify_ipc_buffer(0, 3, b + 8192, 8192, 2);
      comm.irecv(0, 2, 0, 8192).wait();
      comm.irecv(0, 3, 0, 8192).wait();
      MP_CHECK(check(comm, a + 4096, 8192, 1) == SIZE_MAX && check(comm, a + 65536, 8192, 2) == SIZE_MAX);
      MP_CHECK(check(comm, b, 8192, 3) == SIZE_MAX && check(comm, b + 8192, 8192, 4) == SIZE_MAX);
      comm.barrier();
    } else {
      char* src = static_cast<char*>(comm.alloc(8192));
      for (uint32_t id : {2u, 3u}) comm.wait_ipc_buffer(1, id, 1);
      MP_CHECK(comm.stats().opens == 1);  // two buffer ids, one allocation, one open
      fill(comm, src, 8192, 1);
      comm.send_direct(1, src, 8192, 2, 1);
      fill(comm, src, 8192, 2);
      comm.send_direct(1, src, 8192, 3, 1);
      fill(comm, src, 8192, 3);
      comm.send_direct(1, src, 8192, 2, 2);
      fill(comm, src, 8192, 4);
      comm.send_direct(1, src, 8192, 3, 2);
      CommStats st = comm.stats();
      MP_CHECK_MSG(st.opens == 2 && st.closes == 1, "opens " << st.opens << " closes " << st.closes);
      comm.barrier();
    }
  });
  EXPECT_EQ(fails, "");
}

TEST(ContractKill, PeerKilledDuringLargeTransfers) {
  const std::string uid = pltest::unique_test_id("ckill");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, device_of(rank), opts());
    const size_t n = 8 << 20;
    char* buf = static_cast<char*>(comm.alloc(n));
    if (rank == 0) {
      comm.notify_ipc_buffer(1, 1, buf, n, 1);
      comm.barrier();
      for (int k = 0;; ++k) {
        try {
          comm.irecv(1, 1, 0, n).wait();
        } catch (const PeerLostError&) {
          break;
        }
        MP_CHECK(k < 100000);
      }
    } else {
      comm.wait_ipc_buffer(0, 1, 1);
      comm.barrier();
      std::thread([] {
        std::this_thread::sleep_for(milliseconds(300));
        raise(SIGKILL);
      }).detach();
      for (;;) comm.send_direct(0, buf, n, 1, 1);
    }
  }, milliseconds(60000), {1});
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

}  // namespace

// Stream-ordered send/recv on the host backend (synchronous there, same protocol as on GPUs):
// ring exchange on 2-8 ranks, all pairs in one group, thousands of messages in flight, random sizes
// and offsets, both forms, payloads verified in order. Failure and bad-input cases:
// stream_p2p_failure_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using std::chrono::milliseconds;

namespace {

Options quick(int ms = 20000) {
  Options o = Options::from_env();
  o.timeout = milliseconds(ms);
  return o;
}

uint64_t tag_of(int from, int to, uint64_t k) { return (uint64_t(from) << 40) ^ (uint64_t(to) << 32) ^ k; }

// Sizes around the host staging chunk (8 KB) and slot ring (8 slots): empty, tiny, chunk edges,
// more than the whole ring.
const size_t kSizes[] = {0, 1, 8, 8191, 8192, 8193, 100000};

}  // namespace

class StreamRing : public testing::TestWithParam<int> {};

// nccl-tests' sendrecv pattern: each rank sends to the next and receives from the previous, in one
// group (without a group every rank would block in its send on the NCCL form's slot ring for large
// messages, and in the published form on the peer's posted recv).
TEST_P(StreamRing, RingExchangeBothForms) {
  const int n = GetParam();
  const std::string uid = pltest::unique_test_id("sring");
  std::string fails = run_ranks(n, [&](int rank) {
    Communicator comm(uid, rank, n, kHostDevice, quick());
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    const size_t cap = 100000;
    char* pub = static_cast<char*>(comm.alloc(cap));
    comm.notify_ipc_buffer(prev, 7, pub, cap, 1);
    comm.barrier();
    std::vector<char> src(cap), dst(cap);
    uint64_t k = 0;
    for (size_t len : kSizes) {
      for (int form = 0; form < 2; ++form, ++k) {
        pltest::fill_pattern(src.data(), len, tag_of(rank, next, k));
        std::memset(dst.data(), 0, cap);
        std::memset(pub, 0, cap);
        comm.group_start();
        if (form == 0) {
          comm.send(next, src.data(), len, nullptr);
          comm.recv(prev, dst.data(), len, nullptr);
        } else {
          comm.recv(prev, 7, 0, len, nullptr);
          comm.send(next, src.data(), len, 7, 0, 1, nullptr);
        }
        comm.group_end();
        const char* got = form == 0 ? dst.data() : pub;
        size_t bad = pltest::check_pattern(got, len, tag_of(prev, rank, k));
        MP_CHECK_MSG(bad == SIZE_MAX, "form " << form << " len " << len << ": byte " << bad << " differs");
        // The published form's recv completes only once its send landed; the barrier keeps the
        // next round's memset from racing a slower peer's send.
        comm.barrier();
      }
    }
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}
INSTANTIATE_TEST_SUITE_P(Ranks, StreamRing, testing::Values(2, 3, 5, 8));

// Every rank sends to and receives from every other rank in one group, both forms in the same group,
// the calls issued in an order that would deadlock if executed one by one (all sends first).
TEST(StreamGroup, AllPairsOneGroup) {
  const int n = 4;
  const std::string uid = pltest::unique_test_id("sallp");
  std::string fails = run_ranks(n, [&](int rank) {
    Communicator comm(uid, rank, n, kHostDevice, quick());
    const size_t len = 50000;  // > the staging ring: the sends cannot complete before the recvs run
    std::vector<std::vector<char>> src(n, std::vector<char>(len)), dst(n, std::vector<char>(len, 0));
    std::vector<char*> pub(n, nullptr);
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      pub[q] = static_cast<char*>(comm.alloc(len));
      std::memset(pub[q], 0, len);
      comm.notify_ipc_buffer(q, 3, pub[q], len, 1);
      pltest::fill_pattern(src[q].data(), len, tag_of(rank, q, 0));
    }
    comm.barrier();
    comm.group_start();
    for (int q = 0; q < n; ++q)
      if (q != rank) {
        comm.send(q, src[q].data(), len, nullptr);
        comm.send(q, src[q].data(), len / 2, 3, len / 4, 1, nullptr);
      }
    for (int q = 0; q < n; ++q)
      if (q != rank) {
        comm.recv(q, dst[q].data(), len, nullptr);
        comm.recv(q, 3, len / 4, len / 2, nullptr);
      }
    comm.group_end();
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      MP_CHECK(pltest::check_pattern(dst[q].data(), len, tag_of(q, rank, 0)) == SIZE_MAX);
      MP_CHECK(pltest::check_pattern(pub[q] + len / 4, len / 2, tag_of(q, rank, 0)) == SIZE_MAX);
      MP_CHECK(pub[q][len / 4 - 1] == 0 && pub[q][len / 4 + len / 2] == 0);  // nothing outside the range
    }
  });
  EXPECT_EQ(fails, "");
}

// Thousands of NCCL-form messages in one group on each side (far more than the staging slots) and
// 300 published-form messages into distinct slices of one buffer (more than the posted-descriptor
// ring), all verified in order; the receiver's group also interleaves both forms.
TEST(StreamGroup, ThousandsInFlightInOrder) {
  const std::string uid = pltest::unique_test_id("sflight");
  const int kRaw = 3000, kPub = 300;
  const size_t kSlice = 64;
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, quick());
    std::mt19937 rng(1234);
    std::vector<size_t> sizes(kRaw);
    for (auto& s : sizes) s = rng() % 3000;
    char* pub = static_cast<char*>(comm.alloc(kPub * kSlice));
    if (rank == 1) {
      std::memset(pub, 0, kPub * kSlice);
      comm.notify_ipc_buffer(0, 9, pub, kPub * kSlice, 1);
    }
    comm.barrier();
    std::vector<std::vector<char>> bufs(kRaw);
    for (int i = 0; i < kRaw; ++i) bufs[i].resize(sizes[i]);
    std::vector<std::vector<char>> psrc(kPub, std::vector<char>(kSlice));
    comm.group_start();
    for (int i = 0; i < std::max(kRaw, kPub); ++i) {
      if (rank == 0) {
        if (i < kRaw) {
          pltest::fill_pattern(bufs[i].data(), sizes[i], uint64_t(i));
          comm.send(1, bufs[i].data(), sizes[i], nullptr);
        }
        if (i < kPub) {
          pltest::fill_pattern(psrc[i].data(), kSlice, uint64_t(100000 + i));
          comm.send(1, psrc[i].data(), kSlice, 9, size_t(i) * kSlice, 1, nullptr);
        }
      } else {
        if (i < kRaw) comm.recv(0, bufs[i].data(), sizes[i], nullptr);
        if (i < kPub) comm.recv(0, 9, size_t(i) * kSlice, kSlice, nullptr);
      }
    }
    comm.group_end();
    if (rank == 1) {
      for (int i = 0; i < kRaw; ++i)
        MP_CHECK_MSG(pltest::check_pattern(bufs[i].data(), sizes[i], uint64_t(i)) == SIZE_MAX, "message " << i);
      for (int i = 0; i < kPub; ++i)
        MP_CHECK_MSG(pltest::check_pattern(pub + i * kSlice, kSlice, uint64_t(100000 + i)) == SIZE_MAX,
                     "published message " << i);
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

// Standalone calls (no group), random sizes and offsets, both forms, random direction per message
// (both ranks draw the same sequence, so one sends while the other receives).
TEST(StreamPlain, RandomSizesAndOffsets) {
  const std::string uid = pltest::unique_test_id("srand");
  const int kIters = 400;
  const size_t cap = 40000;
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, quick());
    char* pub = static_cast<char*>(comm.alloc(cap));
    std::memset(pub, 0, cap);
    comm.notify_ipc_buffer(1 - rank, 5, pub, cap, 1);
    comm.barrier();
    std::mt19937 rng(99);
    std::vector<char> buf(cap);
    for (int i = 0; i < kIters; ++i) {
      size_t len = rng() % (cap / 2);
      size_t off = rng() % (cap - len + 1);
      bool raw = (rng() & 1) != 0;
      int sender = (rng() & 1) ? 1 : 0;
      uint64_t tag = uint64_t(i) * 7 + 1;
      if (rank == sender) {
        pltest::fill_pattern(buf.data(), len, tag);
        if (raw) comm.send(1 - rank, buf.data(), len, nullptr);
        else comm.send(1 - rank, buf.data(), len, 5, off, 1, nullptr);
      } else {
        std::memset(buf.data(), 0, cap);
        if (raw) comm.recv(1 - rank, buf.data(), len, nullptr);
        else comm.recv(1 - rank, 5, off, len, nullptr);
        const char* got = raw ? buf.data() : pub + off;
        MP_CHECK_MSG(pltest::check_pattern(got, len, tag) == SIZE_MAX, "iteration " << i << " len " << len);
      }
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

// Streaming without groups: the sender runs ahead (NCCL form: up to the staging ring) while the
// receiver drains; host isend/irecv traffic on the same pair keeps its own order alongside.
TEST(StreamPlain, StreamsAndMixesWithHostApi) {
  const std::string uid = pltest::unique_test_id("smix");
  std::string fails = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, kHostDevice, quick());
    char* hb = static_cast<char*>(comm.alloc(4096));
    if (rank == 1) comm.notify_ipc_buffer(0, 2, hb, 4096, 1);
    comm.barrier();
    std::vector<char> b(1000);
    for (int i = 0; i < 2000; ++i) {
      if (rank == 0) {
        pltest::fill_pattern(b.data(), b.size(), uint64_t(i));
        comm.send(1, b.data(), b.size(), nullptr);
        if (i % 100 == 0) {
          comm.barrier();  // the receiver has consumed the previous host-API message
          comm.send_direct(1, b.data(), 64, 2, 1);
        }
      } else {
        comm.recv(0, b.data(), b.size(), nullptr);
        MP_CHECK_MSG(pltest::check_pattern(b.data(), b.size(), uint64_t(i)) == SIZE_MAX, "message " << i);
        if (i % 100 == 0) {
          comm.barrier();
          comm.irecv(0, 2, 0, 64).wait();
          MP_CHECK(pltest::check_pattern(hb, 64, uint64_t(i)) == SIZE_MAX);
        }
      }
    }
  });
  EXPECT_EQ(fails, "");
}

// NCCL form to this rank itself (as NCCL allows, and as gather / scatter / alltoall through the NCCL
// shim use it for the root's own piece): inside a group, matched FIFO with its recv and copied
// beside the other messages of the group; bad pairings are InvalidArgument at group_end with
// nothing of the group run, and outside a group it is refused at the call.
TEST(StreamSelf, SendToItselfInGroups) {
  const std::string uid = pltest::unique_test_id("sself");
  std::string fails = run_ranks(3, [&](int rank) {
    Communicator comm(uid, rank, 3, kHostDevice, quick());
    const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    std::vector<char> src(3 * 70000), dst(3 * 70000), ring(70000), got(70000);
    for (int round = 0; round < 20; ++round) {
      const size_t len = size_t(round) * 3331 + (round % 3);  // includes 0 and odd sizes
      for (int i = 0; i < 3; ++i) pltest::fill_pattern(src.data() + i * 70000, len, tag_of(rank, i, round));
      pltest::fill_pattern(ring.data(), len, tag_of(rank, next, 1000 + round));
      std::memset(dst.data(), 0, dst.size());
      comm.group_start();
      comm.send(rank, src.data(), len, nullptr);  // three self messages, FIFO with the three recvs
      comm.send(next, ring.data(), len, nullptr);
      comm.send(rank, src.data() + 70000, len, nullptr);
      comm.recv(rank, dst.data(), len, nullptr);
      comm.recv(prev, got.data(), len, nullptr);
      comm.recv(rank, dst.data() + 70000, len, nullptr);
      comm.send(rank, src.data() + 140000, len, nullptr);
      comm.recv(rank, dst.data() + 140000, len, nullptr);
      comm.group_end();
      for (int i = 0; i < 3; ++i) {
        size_t bad = pltest::check_pattern(dst.data() + i * 70000, len, tag_of(rank, i, round));
        MP_CHECK_MSG(bad == SIZE_MAX, "round " << round << " self message " << i << " byte " << bad);
      }
      MP_CHECK_MSG(pltest::check_pattern(got.data(), len, tag_of(prev, rank, 1000 + round)) == SIZE_MAX,
                   "round " << round << " ring message");
    }
    std::vector<char> a(64, 0x5a), b(64, 0);
    MP_CHECK_THROWS(comm.send(rank, a.data(), 64, nullptr), InvalidArgument, "outside a group");
    MP_CHECK_THROWS(comm.recv(rank, b.data(), 64, nullptr), InvalidArgument, "outside a group");
    comm.group_start();
    comm.send(rank, a.data(), 64, nullptr);
    MP_CHECK_THROWS(comm.group_end(), InvalidArgument, "1 send(s)", "0 recv(s)");
    comm.group_start();
    comm.send(rank, a.data(), 64, nullptr);
    comm.recv(rank, b.data(), 32, nullptr);
    MP_CHECK_THROWS(comm.group_end(), InvalidArgument, "64 bytes", "32");
    MP_CHECK(b[0] == 0);  // nothing of a refused group ran
    comm.group_start();
    comm.send(rank, a.data(), 64, nullptr);
    comm.recv(rank, b.data(), 64, nullptr);
    comm.group_end();  // the refused groups left nothing behind
    MP_CHECK(b[63] == 0x5a);
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
}

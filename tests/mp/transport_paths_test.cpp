// Multi-process transport tests over every path: backend (host) x completion x path x ranks, with
// random sizes and offsets verified byte for byte.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;

namespace {

struct PathCase {
  Completion completion;
  Path path;
  int ranks;
};

std::string case_name(const testing::TestParamInfo<PathCase>& i) {
  return std::string(to_string(i.param.completion)) + "_" + to_string(i.param.path) + "_" +
         std::to_string(i.param.ranks) + "ranks";
}

Options opts_for(const PathCase& c) {
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  o.completion = c.completion;
  o.path = c.path;
  o.relay_chunk_bytes = 64 << 10;  // several chunks per message, so pipelining is exercised
  o.relay_slots = 3;
  return o;
}

class MpTransportPaths : public testing::TestWithParam<PathCase> {};

// Every rank publishes one buffer per peer, then sends `msgs` random-size messages at random
// offsets to every peer (versioned direct sends and legacy version-0 sends mixed); the receiver
// checks every byte.
TEST_P(MpTransportPaths, RandomSizesAllPairsVerified) {
  const PathCase c = GetParam();
  const std::string uid = pltest::unique_test_id("paths");
  std::string fails = run_ranks(c.ranks, [&](int rank) {
    Communicator comm(uid, rank, c.ranks, kHostDevice, opts_for(c));
    const size_t kBuf = 1 << 20;
    const int msgs = 24;
    std::vector<char*> rbuf(c.ranks, nullptr);
    for (int p = 0; p < c.ranks; ++p) {
      if (p == rank) continue;
      rbuf[p] = static_cast<char*>(comm.alloc(kBuf));
      std::memset(rbuf[p], 0, kBuf);
      comm.notify_ipc_buffer(p, 7, rbuf[p], kBuf, 1);
    }
    for (int p = 0; p < c.ranks; ++p)
      if (p != rank) comm.wait_ipc_buffer(p, 7, 1);
    // Same plan on both sides: seeded by (sender, receiver).
    auto plan = [&](int s, int r, int k, size_t* off, size_t* len) {
      std::mt19937_64 g(uint64_t(s) * 1000003 + uint64_t(r) * 7919 + uint64_t(k));
      *len = (k % 5 == 0) ? 1 + g() % 7 : 1 + g() % (200 << 10);
      *off = g() % (kBuf - *len + 1);
    };
    std::vector<char> src(kBuf);
    for (int k = 0; k < msgs; ++k) {
      // Post all receives of this round, then send to everyone, then wait and verify.
      std::vector<Request> recvs(c.ranks);
      std::vector<size_t> roff(c.ranks), rlen(c.ranks);
      for (int p = 0; p < c.ranks; ++p) {
        if (p == rank) continue;
        plan(p, rank, k, &roff[p], &rlen[p]);
        recvs[p] = comm.irecv(p, 7, roff[p], rlen[p]);
      }
      for (int p = 0; p < c.ranks; ++p) {
        if (p == rank) continue;
        size_t off, len;
        plan(rank, p, k, &off, &len);
        pltest::fill_pattern(src.data(), len, uint64_t(rank) << 32 | uint64_t(p) << 16 | k);
        uint64_t version = (k % 3 == 2) ? 0 : 1;  // every third message uses the legacy handshake
        comm.isend(p, src.data(), len, 7, off, version).wait();
      }
      for (int p = 0; p < c.ranks; ++p) {
        if (p == rank) continue;
        recvs[p].wait();
        size_t bad = pltest::check_pattern(rbuf[p] + roff[p], rlen[p], uint64_t(p) << 32 | uint64_t(rank) << 16 | k);
        MP_CHECK_MSG(bad == SIZE_MAX, "message " << k << " from " << p << " wrong at byte " << bad << " of " << rlen[p]);
      }
      comm.barrier();  // the next round may overwrite this round's ranges
    }
    for (int p = 0; p < c.ranks; ++p) {
      if (p == rank) continue;
      MP_CHECK(comm.path_to(p) == (c.path == Path::Relay ? Path::Relay : Path::Direct));
      MP_CHECK(!comm.shares_process(p));  // every rank is a process of its own here
      if (c.path != Path::Relay)
        MP_CHECK(comm.completion_with(p) == (c.completion == Completion::Ring ? Completion::Ring : Completion::DoneSeq));
    }
    CommStats st = comm.stats();
    if (c.path == Path::Relay) MP_CHECK(st.sends_relay == uint64_t(msgs) * (c.ranks - 1));
    else if (c.completion == Completion::Ring) MP_CHECK(st.sends_ring == uint64_t(msgs) * (c.ranks - 1));
    else MP_CHECK(st.sends_done_seq == uint64_t(msgs) * (c.ranks - 1));
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// Ranks as threads of one process (nccl-tests -g 2 / -t 2): each says so of the other.
TEST(MpTransportShares, RanksOfOneProcess) {
  const std::string uid = pltest::unique_test_id("shares");
  Options o;
  o.timeout = std::chrono::milliseconds(10000);
  bool shares[2] = {false, false};
  const auto err = pltest::run_thread_pair([&](int r) {
    Communicator c(uid, r, 2, kHostDevice, o);
    shares[r] = c.shares_process(1 - r);
    c.barrier();
  });
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
  EXPECT_TRUE(shares[0]);
  EXPECT_TRUE(shares[1]);
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

INSTANTIATE_TEST_SUITE_P(
    HostBackend, MpTransportPaths,
    testing::Values(PathCase{Completion::Auto, Path::Direct, 2}, PathCase{Completion::Ring, Path::Direct, 2},
                    PathCase{Completion::DoneSeq, Path::Relay, 2}, PathCase{Completion::Auto, Path::Direct, 3},
                    PathCase{Completion::Ring, Path::Direct, 3}, PathCase{Completion::Auto, Path::Relay, 3},
                    PathCase{Completion::DoneSeq, Path::Direct, 4}, PathCase{Completion::Ring, Path::Direct, 4},
                    PathCase{Completion::Auto, Path::Relay, 4}, PathCase{Completion::Auto, Path::Direct, 8}),
    case_name);

}  // namespace

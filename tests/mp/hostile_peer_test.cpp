// A hostile (or badly broken) peer: rank 1 is a legitimate member of the job that, once set up,
// scribbles random bytes over every peerlink shared-memory mapping it holds — the pair segments,
// the done_seq channel, relay staging, the bootstrap/control segments, the collectives' scratch and
// the victim's published buffer — while both ranks keep sending, receiving and reducing.
//
// The victim (rank 0) may see its operations fail, but only with peerlink's typed errors; it must
// never crash, hang past its bounded waits, or write outside the buffers it published (checked with
// a private canary allocation the hostile rank never maps), and close() must return.
//
// The scribbler finds the mappings through /proc/self/maps (every peerlink segment is a /dev/shm
// file named pl_..., mapped even after its name was unlinked), so the test knows nothing of the
// transport's internal layouts and keeps working as they change.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using namespace std::chrono;
using pltest::run_ranks;

namespace {

struct SharedCtl {  // anonymous shared memory between the test's ranks (never a pl_ segment)
  std::atomic<int> victim_done;
  std::atomic<int> hostile_done;
  std::atomic<uint64_t> victim_errors;
  std::atomic<uint64_t> victim_ok;
  std::atomic<uint64_t> scribbles;
};

struct Range {
  char* lo;
  char* hi;
};

// Writable mappings of peerlink segments in this process.
std::vector<Range> peerlink_mappings() {
  std::vector<Range> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/pl_") == std::string::npos) continue;
    std::istringstream is(line);
    std::string addr, perms;
    is >> addr >> perms;
    if (perms.size() < 2 || perms[1] != 'w') continue;
    size_t dash = addr.find('-');
    auto lo = reinterpret_cast<char*>(std::stoull(addr.substr(0, dash), nullptr, 16));
    auto hi = reinterpret_cast<char*>(std::stoull(addr.substr(dash + 1), nullptr, 16));
    out.push_back({lo, hi});
  }
  return out;
}

// Random 1-, 8- and 64-byte writes at random places of random mappings, biased towards the first
// pages of each mapping (headers, counters, rings, registries live there).
void scribble_for(milliseconds how_long, uint64_t seed, std::atomic<uint64_t>& count) {
  std::mt19937_64 rng(seed);
  auto until = steady_clock::now() + how_long;
  std::vector<Range> maps;
  auto refreshed = steady_clock::now() - seconds(1);
  while (steady_clock::now() < until) {
    if (steady_clock::now() - refreshed > milliseconds(100)) {
      maps = peerlink_mappings();
      refreshed = steady_clock::now();
    }
    if (maps.empty()) {
      std::this_thread::sleep_for(milliseconds(1));
      continue;
    }
    const Range& m = maps[rng() % maps.size()];
    size_t span = static_cast<size_t>(m.hi - m.lo);
    size_t window = (rng() % 4 == 0) ? span : std::min<size_t>(span, 3 * 4096 + 256 * 1024);
    size_t len = (rng() % 3 == 0) ? 64 : (rng() % 2 ? 8 : 1);
    if (window <= len) continue;
    char* p = m.lo + rng() % (window - len);
    for (size_t i = 0; i < len; ++i) p[i] = static_cast<char>(rng() % 5 == 0 ? 0xff : rng());
    count.fetch_add(1, std::memory_order_relaxed);
    if (count.load(std::memory_order_relaxed) % 64 == 0) std::this_thread::sleep_for(microseconds(200));
  }
}

struct Case {
  Path path;
  Completion completion;
};

class HostilePeer : public testing::TestWithParam<Case> {};

TEST_P(HostilePeer, VictimGetsTypedErrorsOrKeepsWorking) {
  const std::string uid = pltest::unique_test_id("hostile");
  const Case c = GetParam();
  auto* ctl = static_cast<SharedCtl*>(
      mmap(nullptr, sizeof(SharedCtl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(ctl, MAP_FAILED);
  new (ctl) SharedCtl{};
  constexpr size_t kBuf = 64 << 10, kMsg = 4096;

  std::string fails = run_ranks(2, [&](int rank) {
    Options o;
    o.timeout = milliseconds(1500);
    o.path = c.path;
    o.completion = c.completion;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const int peer = 1 - rank;
    char* inbox = static_cast<char*>(comm.alloc(kBuf));
    std::memset(inbox, 0x11, kBuf);
    comm.notify_ipc_buffer(peer, 1, inbox, kBuf, 1);
    comm.wait_ipc_buffer(peer, 1, 1);
    std::vector<float> red(256);
    for (size_t i = 0; i < red.size(); ++i) red[i] = float(rank * 1000 + i + 1);
    allreduce(comm, red.data(), red.data(), red.size(), DataType::F32, ReduceOp::Sum);  // scratch set up
    comm.barrier();

    if (rank == 1) {  // hostile
      std::thread scribbler([&] { scribble_for(milliseconds(1200), 0x5eed + uint64_t(c.path) * 7, ctl->scribbles); });
      std::vector<char> src(kMsg, 0x22);
      auto until = steady_clock::now() + milliseconds(1200);
      while (steady_clock::now() < until) {
        try {
          Request r = comm.irecv(0, 1, 0, kMsg);
          comm.send_direct(0, src.data(), kMsg, 1, 1);
          r.wait(milliseconds(100));
        } catch (...) {  // the hostile rank's own state is corrupt too: anything goes here
        }
      }
      scribbler.join();
      ctl->hostile_done.store(1);
      for (int i = 0; i < 20000 && !ctl->victim_done.load(); ++i) std::this_thread::sleep_for(milliseconds(1));
      _exit(0);  // no orderly close: its mappings are garbage by now
    }

    // victim
    char* canary = static_cast<char*>(comm.alloc(kBuf));  // never published: nobody may write it
    pltest::fill_pattern(canary, kBuf, 77);
    std::vector<char> out(kMsg);
    pltest::fill_pattern(out.data(), kMsg, 5);
    const std::vector<char> out_copy = out;
    auto until = steady_clock::now() + milliseconds(2500);
    uint64_t k = 0;
    while (steady_clock::now() < until) {
      try {
        switch (k++ % 4) {
          case 0: {
            Request r = comm.irecv(1, 1, 0, kMsg);
            r.wait(milliseconds(200));
            break;
          }
          case 1:
            comm.send_direct(1, out.data(), kMsg, 1, 1);
            break;
          case 2:
            comm.isend(1, out.data(), kMsg, 1, 0, 1).wait(milliseconds(200));
            break;
          default:
            allreduce(comm, red.data(), red.data(), red.size(), DataType::F32, ReduceOp::Sum);
        }
        ctl->victim_ok.fetch_add(1);
      } catch (const Error&) {  // typed errors are the allowed outcome; anything else fails the rank
        ctl->victim_errors.fetch_add(1);
      }
    }
    // Give a send that timed out no chance to write later: every call returned before this check.
    MP_CHECK_MSG(pltest::check_pattern(canary, kBuf, 77) == SIZE_MAX, "the victim's private allocation was written");
    MP_CHECK_MSG(out == out_copy, "a send modified its source buffer");
    auto t0 = steady_clock::now();
    comm.close();
    auto dt = duration_cast<milliseconds>(steady_clock::now() - t0).count();
    MP_CHECK_MSG(dt < 5000, "close() took " << dt << " ms");
    ctl->victim_done.store(1);
  }, milliseconds(60000), {1});
  EXPECT_EQ(fails, "");
  std::printf("  scribbles %llu, victim calls ok %llu, failed with typed errors %llu\n",
              (unsigned long long)ctl->scribbles.load(), (unsigned long long)ctl->victim_ok.load(),
              (unsigned long long)ctl->victim_errors.load());
  EXPECT_GT(ctl->scribbles.load(), 1000u) << "the hostile rank wrote too little to mean anything";
  EXPECT_GT(ctl->victim_ok.load() + ctl->victim_errors.load(), 10u);
  // The hostile rank died without closing and may have scribbled over segment headers (owner
  // fields): remove what it left, by this test's id only.
  for (const auto& name : pltest::leftover_segments(uid)) shm_unlink(("/" + name).c_str());
  munmap(ctl, sizeof(SharedCtl));
}

INSTANTIATE_TEST_SUITE_P(Paths, HostilePeer,
                         testing::Values(Case{Path::Direct, Completion::Auto}, Case{Path::Direct, Completion::Ring},
                                         Case{Path::Relay, Completion::Auto}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return std::string(to_string(i.param.path)) + "_" + to_string(i.param.completion);
                         });

}  // namespace

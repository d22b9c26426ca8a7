// send_direct's wait with the interruption hook (a failed send never reads src again): the wait runs
// Options::interrupt_check (Python's Ctrl-C), so an interrupted send_direct returns promptly, with
// what the hook threw, and gives the message up first — src is unmapped right after and never read
// again. Its own bound (the overload with a timeout, used by the Python binding) is honoured and
// reported like the communicator's. Host backend, relay path with a stopped receiver.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;
using namespace std::chrono;

namespace {

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted by the test's hook") {}
};

struct Shared {
  std::atomic<pid_t> pid;
};

void wait_stopped(pid_t pid) {
  for (;;) {
    char st = 0;
    FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (f) std::fscanf(f, "%*d %*s %c", &st), std::fclose(f);
    if (st == 'T') return;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

// Rank 1 publishes, posts an irecv and stops itself; rank 0's send_direct fills the staging ring
// and waits. `fail` makes that wait end (interrupt or own timeout) and checks how; then src
// vanishes, rank 1 resumes (its irecv fails: the message was given up) and the pair keeps working.
void stalled_send(const std::string& uid, Shared* sh, const std::function<void(Communicator&, char*, size_t)>& fail,
                  const std::function<void()>& hook) {
  std::string fails = run_ranks(2, [&](int rank) {
    Options o;
    o.timeout = milliseconds(20000);
    o.path = Path::Relay;
    o.relay_slots = 2;
    o.relay_chunk_bytes = 4096;
    if (rank == 0) o.interrupt_check = hook;
    Communicator comm(uid, rank, 2, kHostDevice, o);
    const size_t n = 64 << 10;
    if (rank == 1) {
      char* buf = static_cast<char*>(comm.alloc(n));
      comm.notify_ipc_buffer(0, 1, buf, n, 1);
      Request r = comm.irecv(0, 1, 0, n);
      sh->pid = getpid();
      comm.barrier();
      raise(SIGSTOP);  // rank 0 continues us
      MP_CHECK_THROWS(r.wait(), InvalidArgument, "gave the message up");
      Request ok = comm.irecv(0, 1, 0, 512);
      ok.wait();
      MP_CHECK(pltest::check_pattern(buf, 512, 2) == SIZE_MAX);
    } else {
      comm.wait_ipc_buffer(1, 1, 1);
      comm.barrier();
      wait_stopped(sh->pid.load());
      char* src = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      pltest::fill_pattern(src, n, 1);
      const auto t0 = steady_clock::now();
      fail(comm, src, n);
      const auto took = duration_cast<milliseconds>(steady_clock::now() - t0).count();
      MP_CHECK_MSG(took < 5000, "send_direct returned after " << took << " ms (communicator timeout 20000)");
      munmap(src, n);  // any later read of src by the library crashes this rank
      kill(sh->pid.load(), SIGCONT);
      std::this_thread::sleep_for(milliseconds(200));
      std::vector<char> small(512);
      pltest::fill_pattern(small.data(), 512, 2);
      comm.send_direct(1, small.data(), 512, 1, 1);
    }
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

}  // namespace

TEST(MpSendDirectWait, InterruptGivesTheMessageUpAndReturnsPromptly) {
  auto* sh = new (mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Shared{};
  std::atomic<bool> armed{false};
  steady_clock::time_point fire_at;
  stalled_send(pltest::unique_test_id("sd-intr"), sh,
               [&](Communicator& comm, char* src, size_t n) {
                 fire_at = steady_clock::now() + milliseconds(300);
                 armed = true;
                 bool thrown = false;
                 try {
                   comm.send_direct(1, src, n, 1, 1);
                 } catch (const Interrupted&) {
                   thrown = true;
                 }
                 armed = false;
                 MP_CHECK_MSG(thrown, "send_direct did not end with the hook's exception");
               },
               [&] {
                 if (armed && steady_clock::now() > fire_at) throw Interrupted();
               });
}

TEST(MpSendDirectWait, OwnTimeoutIsHonouredAndNamed) {
  auto* sh = new (mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Shared{};
  stalled_send(pltest::unique_test_id("sd-timeout"), sh,
               [&](Communicator& comm, char* src, size_t n) {
                 MP_CHECK_THROWS(comm.send_direct(1, src, n, 1, 1, 0, milliseconds(400)), TimeoutError,
                                 "isend to rank 1", "not complete after 400 ms");
               },
               nullptr);
}

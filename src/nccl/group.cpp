// ncclGroupStart / ncclGroupEnd: a group is per thread (as in NCCL) and may span several
// communicators (nccl-tests -g 2 drives two communicators of one process from one thread).
//
// Ops called inside a group are queued and issued at the outermost ncclGroupEnd, batched per
// communicator. Every peerlink call that may wait on the host for the other ranks (communicator
// setup, the first op with a peer, the host backend which is synchronous) would deadlock if the
// batches of two communicators of this process ran one after the other on this thread: rank 0's
// batch would wait for rank 1's, which has not started. So when a group holds more than one
// batch that may wait (serial_ok below says which cannot: warm GPU send/recv and set-up GPU
// collectives outside a capture only enqueue kernels, and run one after the other here), each runs on its own
// thread and group end joins them; a group of one batch (the usual
// one-communicator-per-process case) runs on the calling thread, with no thread cost. The extra
// threads are parked helpers (Helpers below), not created per group: a thread creation costs tens
// of microseconds, which an eager nccl-tests -g 2 iteration would pay every time.
// Ops of communicators routed to the real NCCL form one batch issued inside a real NCCL group.
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "real_nccl.h"
#include "shim.h"

namespace peerlink::nccl {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<Op> ops;
  ncclResult_t deferred_error = ncclSuccess;  // an op rejected while queued: reported at group end
};
thread_local GroupState g_group;

// Parked helper threads. A dispatcher takes idle helpers (creating one when none is idle, so
// concurrent group ends of several threads never wait for each other), hands each a task, runs its
// own task, and waits for the helpers: a short spin (their batches are usually microseconds of
// launches), then the condition variable.
class Helpers {
 public:
  void run(std::vector<std::function<void()>>& tasks) {
    std::atomic<size_t> left{tasks.size() - 1};
    std::mutex done_mu;
    std::condition_variable done_cv;
    for (size_t i = 1; i < tasks.size(); ++i) {
      Worker* w = take();
      std::lock_guard<std::mutex> g(w->mu);
      w->task = [&, i] {
        tasks[i]();
        // Decrement under the lock: the dispatcher returns (ending done_mu's life) only once it
        // held the lock and saw zero, so no helper can still be inside it.
        std::lock_guard<std::mutex> d(done_mu);
        if (left.fetch_sub(1) == 1) done_cv.notify_one();
      };
      w->cv.notify_one();
    }
    tasks[0]();
    for (int spin = 0; spin < 2000 && left.load() != 0; ++spin) std::this_thread::yield();
    std::unique_lock<std::mutex> d(done_mu);
    done_cv.wait(d, [&] { return left.load() == 0; });
  }

  // After fork the helpers do not exist in the child: start over (the old objects are leaked).
  static Helpers*& instance() {
    static Helpers* h = [] {
      pthread_atfork(nullptr, nullptr, [] { instance() = new Helpers; });
      return new Helpers;
    }();
    return h;
  }

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::function<void()> task;
  };

  Worker* take() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!idle_.empty()) {
        Worker* w = idle_.back();
        idle_.pop_back();
        return w;
      }
    }
    Worker* w = new Worker;  // lives as long as the process (helpers are never joined)
    std::thread([this, w] { loop(w); }).detach();
    return w;
  }

  void loop(Worker* w) {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> g(w->mu);
        w->cv.wait(g, [&] { return static_cast<bool>(w->task); });
        task.swap(w->task);
      }
      task();
      std::lock_guard<std::mutex> g(mu_);
      idle_.push_back(w);
    }
  }

  std::mutex mu_;
  std::vector<Worker*> idle_;
};

bool overlaps(const char* a, size_t an, const char* b, size_t bn) { return an && bn && a < b + bn && b < a + an; }

// A send whose source overlaps a receive destination of the batch reads a staged copy instead
// (ncclComm::stage): peerlink's group moves both at once, so the receive could otherwise land
// before the send read those bytes. The copies run on each send's stream ahead of the group.
// Except on a GPU, where the stream engine orders an exact pair itself (a send reading exactly the
// bytes that one receive of the same stream writes, nothing else overlapping either: nccl-tests
// sendrecv and alltoall in place): each received chunk waits until the send read it
// (stream/stream_gate.h), up to kGateCap chunks per peer and launch, 1 GB of 128 KB chunks; up
// to kEngineOrderedBytes per group here. nccl-tests sendrecv_perf -g 2 -G 100 in place, 2x H100:
// see benchmarks/results/2026-11-28-h100x2.md.
constexpr size_t kEngineOrderedBytes = size_t(512) << 20;
bool exact_pair(const Op* s, const Op* r) {
  return s->send_src == r->recv_dst && s->send_bytes == r->recv_bytes && s->stream == r->stream;
}
void stage_overlapping_sends(ncclComm* comm, std::vector<Op*>& ops) {
  size_t need = 0, ordered = 0;
  std::vector<Op*> staged;
  for (Op* s : ops) {
    if (!s->send_bytes) continue;
    int hits = 0;
    const Op* hit = nullptr;
    for (Op* r : ops)
      if (overlaps(s->send_src, s->send_bytes, r->recv_dst, r->recv_bytes)) {
        ++hits;
        hit = r;
      }
    if (!hits) continue;
    // Not on a multi-node communicator: the pair's two halves may go to two engines (a peer of this
    // node and one elsewhere), which order nothing between them.
    if (comm->device >= 0 && comm->route != Route::Hier && hits == 1 && exact_pair(s, hit) &&
        ordered + s->send_bytes <= kEngineOrderedBytes) {
      int senders = 0;  // the receive must be overlapped by this send alone
      for (Op* o : ops) senders += o->send_bytes && overlaps(o->send_src, o->send_bytes, hit->recv_dst, hit->recv_bytes);
      if (senders == 1) {
        ordered += s->send_bytes;
        continue;
      }
    }
    staged.push_back(s);
    need += (s->send_bytes + 255) / 256 * 256;
  }
  if (staged.empty()) return;
  if (need > comm->stage_bytes) {
    size_t grow = comm->stage_bytes ? comm->stage_bytes : 4096;
    while (grow < need) grow *= 2;
    // Legal inside a capture (the first in-place call at a size may be captured, global mode
    // included); the old buffer stays with the communicator: a graph may still replay with it.
    void* fresh = comm->device < 0 ? std::malloc(grow) : device::alloc_capture_safe(grow);
    if (!fresh) throw std::bad_alloc();
    if (comm->stage) comm->old_stages.push_back(comm->stage);
    comm->stage = fresh;
    comm->stage_bytes = grow;
  }
  char* at = static_cast<char*>(comm->stage);
  for (Op* s : staged) {
    if (comm->device < 0) std::memcpy(at, s->send_src, s->send_bytes);
    else device::copy_async(at, s->send_src, s->send_bytes, s->stream);
    *s->src = at;
    at += (s->send_bytes + 255) / 256 * 256;
  }
}

// The send/recv of a peerlink communicator forwarded to the real NCCL (a relayed pair: p2p_forward),
// issued inside one real NCCL group. One at a time, outside a group, they deadlock: NCCL connects a
// pair at the group end of its first send, which waits for the peer's matching receive, and the
// peer is itself inside its own first send (nccl-tests sendrecv_perf hung so on 2x H200 whenever a
// pair relayed). The real communicator is created before the group opens: an init
// inside a real group completes only at its end, too late for the ops that use it.
ncclResult_t run_forwarded_p2p(ncclComm* comm, std::vector<Op*>& ops) {
  bool any = false;
  for (Op* op : ops) any = any || (op->kind == OpKind::P2p && !op->on_peerlink);
  if (!any) return ncclSuccess;
  if (!real_comm(comm, "ncclSend/ncclRecv (forwarded)")) return ncclInvalidUsage;
  const RealNccl* real = real_nccl(comm->opts.nccl_library);
  if (!real) return ncclInternalError;  // loaded already by real_comm
  ncclResult_t first = real->ncclGroupStart();
  if (first != ncclSuccess) return first;
  for (Op* op : ops)
    if (op->kind == OpKind::P2p && !op->on_peerlink) {
      ncclResult_t r = op->run();
      if (first == ncclSuccess) first = r;
    }
  ncclResult_t r = real->ncclGroupEnd();  // always closed, even after a rejected op
  return first != ncclSuccess ? first : r;
}

// Runs one peerlink communicator's ops: inits, then collectives in call order, then the forwarded
// p2p ops inside one real group, then every peerlink p2p op inside one peerlink group (see shim.h
// for why that order is safe).
ncclResult_t run_peerlink_batch(ncclComm* comm, std::vector<Op*>& ops) {
  ncclResult_t first = ncclSuccess;
  auto keep = [&](ncclResult_t r) {
    if (first == ncclSuccess && r != ncclSuccess) first = r;
  };
  for (Op* op : ops)
    if (op->kind == OpKind::Init) keep(op->run());
  if (first != ncclSuccess) return first;
  for (Op* op : ops)
    if (op->kind == OpKind::Collective) keep(op->run());
  keep(run_forwarded_p2p(comm, ops));
  bool any_p2p = false;
  for (Op* op : ops) any_p2p = any_p2p || (op->kind == OpKind::P2p && op->on_peerlink);
  if (!any_p2p) return first;
  if (!comm->pl && !comm->hier) return first != ncclSuccess ? first : ncclInvalidUsage;
  try {
    stage_overlapping_sends(comm, ops);
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclGroupEnd: staging an in-place send: ") + e.what());
    return result_of(e);
  }
  try {
    if (comm->hier) comm->hier->group_start();
    else comm->pl->group_start();
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclGroupEnd: peerlink group_start: ") + e.what());
    return result_of(e);
  }
  for (Op* op : ops)
    if (op->kind == OpKind::P2p && op->on_peerlink) keep(op->run());
  try {
    // Always closed, even after a rejected op: the communicator stays usable.
    if (comm->hier) comm->hier->group_end();
    else comm->pl->group_end();
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclGroupEnd: peerlink send/recv: ") + e.what());
    keep(result_of(e));
  }
  return first;
}

ncclResult_t run_real_batch(std::vector<Op*>& ops) {
  const RealNccl* real = real_nccl("");  // loaded already: a Real route exists only after loading
  ncclResult_t first = ncclSuccess;
  if (!real) return ncclInternalError;
  ncclResult_t r = real->ncclGroupStart();
  if (r != ncclSuccess) return r;
  for (Op* op : ops) {
    r = op->run();
    if (first == ncclSuccess) first = r;
  }
  r = real->ncclGroupEnd();
  return first != ncclSuccess ? first : r;
}

// Batches of a group: one per peerlink communicator, in first-appearance order, and one (comm
// nullptr) for everything routed to the real NCCL. A linear list: groups hold a few communicators.
struct Batch {
  ncclComm* comm;
  std::vector<Op*> ops;
};

// True when the batches may run one after the other on this thread: each is a GPU communicator's
// peerlink calls that only enqueue work and never wait on the host for another rank: send/recv
// once every peer was bound at creation (p2p_warm), collectives once the communicator's first one
// set up its scratch (used_collectives). Anything else (inits, splits, a first collective, ops
// forwarded to the real NCCL, which may create a real communicator or connect, the host backend,
// which is synchronous) may wait for the other communicators' batches, which then must run
// concurrently.
bool serial_ok(const std::vector<Batch>& batches) {
  for (const Batch& b : batches) {
    // Multi-node: the engine's calls may wait for ranks of other batches (its init, its splits).
    if (!b.comm || b.comm->device < 0 || b.comm->route == Route::Hier) return false;
    for (const Op* op : b.ops) {
      if (!op->on_peerlink) return false;
      if (op->kind == OpKind::P2p && (!b.comm->p2p_warm || b.comm->p2p_forward)) return false;
      if (op->kind == OpKind::Collective && !b.comm->used_collectives) return false;
      // Captured, a collective may register its buffers with the peers (Options::
      // coll_graph_register: one host exchange per new buffer, collectives/graph_windows.h).
      if (op->kind == OpKind::Collective && device::is_capturing(op->stream)) return false;
      if (op->kind == OpKind::Init) return false;
    }
  }
  return true;
}

ncclResult_t run_all(std::vector<Op>& ops) {
  std::vector<Batch> batches;
  for (Op& op : ops) {
    ncclComm* key = op.comm->route != Route::Real ? op.comm : nullptr;
    Batch* b = nullptr;
    for (Batch& x : batches)
      if (x.comm == key) b = &x;
    if (!b) {
      batches.push_back(Batch{key, {}});
      b = &batches.back();
    }
    b->ops.push_back(&op);
  }
  auto run_one = [&](size_t i) -> ncclResult_t {
    ncclComm* key = batches[i].comm;
    std::vector<Op*>& b = batches[i].ops;
    if (!key) return run_real_batch(b);
    // The communicator's device current on this thread for the batch (forwarded ops and CUDA
    // calls of the application's kind expect it), the caller's put back after.
    int prev = -2;
    try {
      if (key->device >= 0) {
        prev = device::current();
        if (prev != key->device) device::set_current(key->device);
      }
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclGroupEnd: set device: ") + e.what());
      return result_of(e);
    }
    ncclResult_t r = run_peerlink_batch(key, b);
    try {
      if (prev >= 0 && prev != key->device) device::set_current(prev);
    } catch (...) {
    }
    return r;
  };
  if (batches.size() == 1) return run_one(0);
  std::vector<ncclResult_t> res(batches.size(), ncclSuccess);
  if (serial_ok(batches)) {
    // No helper hand-off (a thread wake-up and a wait per group, the likely largest host cost of
    // eager nccl-tests -g 2; not measured separately yet): every batch only enqueues kernels.
    for (size_t i = 0; i < batches.size(); ++i) res[i] = run_one(i);
  } else {
    std::vector<std::function<void()>> tasks;
    for (size_t i = 0; i < batches.size(); ++i) tasks.emplace_back([&, i] { res[i] = run_one(i); });
    Helpers::instance()->run(tasks);
  }
  for (ncclResult_t r : res)
    if (r != ncclSuccess) return r;
  return ncclSuccess;
}

}  // namespace

bool in_group() { return g_group.depth > 0; }

ncclResult_t submit(Op op) {
  if (g_group.depth > 0) {
    g_group.ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> one;
  one.push_back(std::move(op));
  return run_all(one);
}

ncclResult_t group_start() {
  ++g_group.depth;
  return ncclSuccess;
}

ncclResult_t group_end() {
  if (g_group.depth <= 0) {
    set_last_error("ncclGroupEnd: not in a group (ncclGroupStart missing)");
    return ncclInvalidUsage;
  }
  if (--g_group.depth > 0) return ncclSuccess;
  std::vector<Op> ops;
  ops.swap(g_group.ops);
  ncclResult_t deferred = g_group.deferred_error;
  g_group.deferred_error = ncclSuccess;
  ncclResult_t r = ops.empty() ? ncclSuccess : run_all(ops);
  return deferred != ncclSuccess ? deferred : r;
}

ncclResult_t group_simulate_end(ncclSimInfo_t* info) {
  if (!info) {
    set_last_error("ncclGroupSimulateEnd: simInfo is NULL");
    return ncclInvalidArgument;
  }
  if (g_group.depth <= 0) {
    set_last_error("ncclGroupSimulateEnd: not in a group");
    return ncclInvalidUsage;
  }
  // Simulation only: the group's ops are dropped, not run (as NCCL does). peerlink has no cost
  // model to report, so the estimate stays "undefined".
  if (--g_group.depth == 0) {
    g_group.ops.clear();
    g_group.deferred_error = ncclSuccess;
  }
  info->estimatedTime = NCCL_UNDEF_FLOAT;
  return ncclSuccess;
}

}  // namespace peerlink::nccl

// The NCCL-compatible library (libnccl.so.2): NCCL's C API on peerlink for communicators whose ranks
// are all on one node, on peerlink inside each node and the real NCCL between nodes for
// communicators that span nodes (peerlink::HierCommunicator, hier_glue.h), on the real NCCL (dlopen,
// real_nccl.h) for communicators of real NCCL ids and for whatever peerlink does not implement. Top layer: it uses peerlink's public API only
// (include/peerlink/*.h) and links libpeerlink.so, which exports nothing else.
//
// Handles: ncclComm_t from the program points to our `ncclComm` (below); a routed or lazily created
// real communicator hangs off it (`real`). Only the real library's calls of its own API can bring a
// real communicator here (kShimCommMagic). Errors: every entry point catches and
// returns an ncclResult_t (never throws across the C boundary), and records the message for
// ncclGetLastError.
#pragma once
#include <nccl.h>

#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <cstdarg>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "peerlink/peerlink.h"

#define PL_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

namespace peerlink::nccl {

struct RealNccl;

// ncclResult_t of a C++ exception (the one mapping of peerlink's error types to NCCL's codes).
ncclResult_t result_of(const std::exception& e);
// Records `msg` as the last error (ncclGetLastError) and says it at WARN.
void set_last_error(const std::string& msg);
std::string last_error();

// Logging: "<host>:<pid> [rank] NCCL INFO peerlink: ..." like NCCL's own lines, so that a user who
// greps NCCL_DEBUG=INFO output finds which path each communicator and op took.
struct Log {
  bool info = false;   // NCCL_DEBUG=INFO|TRACE or PEERLINK_DEBUG=INFO|TRACE
  bool trace = false;  // ... TRACE: every op
  static Log from(const Options& o);
};
void log_line(const char* level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Peerlink: one node, `pl`. Hier: several nodes, `hier` (its world engine's real communicator
// serves what is forwarded). Real: the real NCCL's communicator `real`.
enum class Route { Peerlink, Real, Hier };

}  // namespace peerlink::nccl

// The first member of every ncclComm this library makes. The real NCCL loaded beside it calls a
// few API functions on its own communicators (its ncclCommUserRank calls ncclCommGetAsyncError).
// When the process bound those names to this library first -- torch loads the real libnccl.so.2
// globally, so a later RTLD_DEEPBIND open of the same file cannot isolate it -- such calls arrive
// here with a communicator of the real library: without this magic, and forwarded (foreign_comm).
constexpr uint64_t kShimCommMagic = 0x6d6d6f636b6e6c70ULL;  // "plnkcomm"

// The opaque type behind ncclComm_t (nccl.h declares `struct ncclComm`).
struct ncclComm {
  const uint64_t magic = kShimCommMagic;
  int rank = -1;
  int nranks = 0;
  int device = -1;  // CUDA device, or peerlink::kHostDevice on the host backend (test hook)
  peerlink::nccl::Route route = peerlink::nccl::Route::Real;
  peerlink::Options opts;
  peerlink::nccl::Log log;
  std::string pl_id;  // peerlink unique id (Route::Peerlink): children of ncclCommSplit derive theirs
  std::unique_ptr<peerlink::Communicator> pl;
  std::unique_ptr<peerlink::HierCommunicator> hier;  // Route::Hier
  // The real NCCL communicator: the communicator itself on Route::Real, created lazily on the first
  // forwarded op on Route::Peerlink (real_mu guards that creation).
  ncclComm_t real = nullptr;
  std::mutex real_mu;
  // allreduce_check (the device error word that every peerlink collective shares) only after a
  // collective ran (it would set up state); read by a watchdog thread (torch polls
  // ncclCommGetAsyncError) while the op's thread sets it.
  std::atomic<bool> used_collectives{false};
  std::atomic<int> async_error{ncclSuccess};
  int split_count = 0;          // children created by ncclCommSplit (distinct peerlink ids)
  // Init finished (deferred inits in a group fill it at group end); atomic: torch's watchdog
  // thread may poll ncclCommGetAsyncError while the group's thread creates the communicator.
  std::atomic<bool> ready{false};
  ncclResult_t init_result = ncclSuccess;

  // Guards what follows (ops of one communicator may come from several threads' groups).
  std::mutex mu;
  // ncclRedOpCreatePreMulSum on a peerlink communicator: a local placeholder op (>= ncclNumOps).
  // An op using it copies this record when it is called (nccl-tests destroys the op before
  // ncclGroupEnd, as NCCL allows) and creates the real NCCL op on the real communicator when it
  // runs, destroying it right after (creating a real communicator inside a group would deadlock -g 2).
  struct PreMul {
    std::vector<char> scalar;  // ncclScalarHostImmediate: the value, read at creation
    void* device_scalar = nullptr;  // ncclScalarDevice: the caller's pointer
    ncclDataType_t dtype = ncclFloat32;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
  };
  std::map<int, PreMul> premul;
  std::set<std::string> logged;  // (op, path) pairs already said at INFO
  // Send/recv with this rank itself (NCCL allows it; peerlink's p2p does not): matched FIFO here.
  struct SelfMsg {
    void* buf;
    size_t bytes;
  };
  std::deque<SelfMsg> self_sends, self_recvs;
  // Staging for a send whose source overlaps a receive destination of the same group (in-place
  // sendrecv, as nccl-tests runs it): the source is copied here first, in stream order, so the
  // receive cannot overwrite bytes the send has not read yet. Grown on demand, also inside a graph
  // capture (device::alloc_capture_safe); a captured graph may replay with an older, smaller
  // buffer at any time, so every buffer ever used is kept (old_stages) until the communicator is
  // destroyed. Growth doubles, so all of them together stay below twice the largest.
  void* stage = nullptr;
  size_t stage_bytes = 0;
  std::vector<void*> old_stages;
  // Stream-ordered send/recv state, set once at creation (warm_p2p, group.cpp): p2p_warm = every
  // peer was bound by an eager zero-byte exchange, so no later call maps anything or waits on the
  // host (a first send/recv may be captured, and batches of several communicators may run one
  // after the other on one thread); p2p_forward = some pair has no stream-ordered path (relay, no
  // peer access): every send/recv of this communicator goes to the real NCCL.
  bool p2p_warm = false;
  bool p2p_forward = false;
  int shrink_count = 0;  // children created by ncclCommShrink (distinct peerlink ids)
  // ncclCommWindowRegister (api_misc.cpp): the ncclWindow_t handed out is the address of one of
  // these, owned here (under mu) until ncclCommWindowDeregister ran, or the communicator dies.
  // id: the peerlink window (peerlink/windows.h), 0 while the registration is queued in a group,
  // or when it failed or was not made (flags without NCCL_WIN_COLL_SYMMETRIC). dropping: a
  // deregistration was called (queued or done), so a second one is an unknown window.
  struct Window {
    uint64_t id = 0;
    void* buff = nullptr;
    size_t size = 0;
    bool dropping = false;
  };
  std::map<const void*, std::unique_ptr<Window>> windows;
  ~ncclComm();
};

namespace peerlink::nccl {

// Group / deferral (group.cpp). An op is queued when a group is open on this thread (or, for
// ncclCommInit* in a group, always), else run at once. `collective` ops of one communicator run in
// call order; its p2p ops run after them in one peerlink group (NCCL leaves the order inside a
// group unspecified and every rank reorders alike, so no deadlock and no mismatch).
enum class OpKind { Init, Collective, P2p };
struct Op {
  ncclComm* comm = nullptr;
  OpKind kind = OpKind::Collective;
  // A call of peerlink's own (not forwarded to the real NCCL, not an init or split): once the
  // communicator's collectives are set up it only enqueues work on the GPU (group.cpp serial_ok).
  bool on_peerlink = false;
  std::function<ncclResult_t()> run;
  // Plain ncclSend / ncclRecv: the ranges, for the overlap check of the batch (group.cpp); a send
  // reads its source through `src` (replaced by the staged copy when it overlaps a receive).
  const char* send_src = nullptr;
  size_t send_bytes = 0;
  char* recv_dst = nullptr;
  size_t recv_bytes = 0;
  void* stream = nullptr;  // the op's stream (peerlink ops)
  std::shared_ptr<const void*> src;
};
bool in_group();
ncclResult_t submit(Op op);
ncclResult_t group_start();
ncclResult_t group_end();
ncclResult_t group_simulate_end(ncclSimInfo_t* info);

// The real NCCL communicator of `comm` (creating it on first use for a peerlink communicator: a
// collective over comm's ranks, run by every rank at the same forwarded op). Null with the reason
// recorded (no real library, host backend) -> the caller returns ncclInvalidUsage.
ncclComm_t real_comm(ncclComm* comm, const char* what);

// Wraps a communicator the real NCCL made (split/shrink of a real-routed one).
ncclComm* wrap_real(ncclComm* parent, ncclComm_t r);

// Binds every peer of a fresh peerlink communicator for stream-ordered send/recv (one eager
// zero-byte exchange with each, all ranks at creation) and sets p2p_warm / p2p_forward.
void warm_p2p(ncclComm* comm);

// Guard that the caller's handle is one of ours and initialised.
ncclResult_t check_comm(const ncclComm* comm, const char* what);

// A communicator the real NCCL made and passed to one of this library's exports (kShimCommMagic):
// the real library to forward the call to. Null for a null or peerlink communicator; *unusable is
// set when it is foreign but no real NCCL is loaded (the call then fails with ncclInvalidArgument).
const RealNccl* foreign_comm(const ncclComm* comm, const char* what, bool* unusable);

// The fields of an ncclConfig_t that a peerlink communicator takes into its Options: maxCTAs, the
// most blocks of any of its kernels (Options::max_blocks). The others are NCCL's own tuning.
void apply_config(Options& o, const ncclConfig_t* config);

}  // namespace peerlink::nccl

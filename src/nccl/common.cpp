// Error mapping, last error, logging, the lazily created real NCCL communicator, and the wrapper
// of a communicator the real NCCL made.
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <strings.h>

#include "hier_glue.h"
#include "real_nccl.h"
#include "shim.h"

namespace peerlink::nccl {
namespace {

std::mutex g_err_mu;
std::string g_last_error;  // process-wide, as NCCL's ncclGetLastError (the comm argument is unused)

bool level_at_least(const std::string& nccl_debug, const char* want) {
  return strcasecmp(nccl_debug.c_str(), want) == 0;
}

}  // namespace

ncclResult_t result_of(const std::exception& e) {
  if (dynamic_cast<const InvalidArgument*>(&e)) return ncclInvalidArgument;
  if (dynamic_cast<const UnsupportedError*>(&e)) return ncclInvalidUsage;
  if (dynamic_cast<const PeerLostError*>(&e)) return ncclRemoteError;
  if (dynamic_cast<const TimeoutError*>(&e)) return ncclRemoteError;
  if (dynamic_cast<const GpuError*>(&e)) return ncclUnhandledCudaError;
  if (dynamic_cast<const SysError*>(&e)) return ncclSystemError;
  if (dynamic_cast<const std::bad_alloc*>(&e)) return ncclSystemError;
  return ncclInternalError;
}

void set_last_error(const std::string& msg) {
  {
    std::lock_guard<std::mutex> g(g_err_mu);
    g_last_error = msg;
  }
  log_line("WARN", "%s", msg.c_str());
}

std::string last_error() {
  std::lock_guard<std::mutex> g(g_err_mu);
  return g_last_error;
}

Log Log::from(const Options& o) {
  Log l;
  bool nccl_info = level_at_least(o.nccl_debug, "INFO");
  bool nccl_trace = level_at_least(o.nccl_debug, "TRACE");
  l.trace = nccl_trace || o.log_level >= LogLevel::Trace;
  l.info = l.trace || nccl_info || o.log_level >= LogLevel::Info;
  return l;
}

void log_line(const char* level, const char* fmt, ...) {
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  // One fprintf: lines of several threads do not interleave.
  fprintf(stderr, "%s:%d NCCL %s peerlink: %s\n", host, static_cast<int>(getpid()), level, msg);
}

ncclResult_t check_comm(const ncclComm* comm, const char* what) {
  if (!comm) {
    set_last_error(std::string(what) + ": comm is NULL");
    return ncclInvalidArgument;
  }
  if (!comm->ready) {
    set_last_error(std::string(what) + ": communicator not initialised (its ncclCommInitRank failed or is pending)");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

const RealNccl* foreign_comm(const ncclComm* comm, const char* what, bool* unusable) {
  *unusable = false;
  if (!comm || comm->magic == kShimCommMagic) return nullptr;
  if (const RealNccl* real = real_nccl_if_loaded()) return real;
  set_last_error(std::string(what) + ": not a communicator of this library, and no real NCCL is loaded");
  *unusable = true;
  return nullptr;
}

// Wraps a communicator the real NCCL made (split/shrink of a real one).
ncclComm* wrap_real(ncclComm* parent, ncclComm_t r) {
  const RealNccl* real = real_nccl(parent->opts.nccl_library);
  auto* c = new ncclComm;
  c->route = Route::Real;
  c->opts = parent->opts;
  c->log = parent->log;
  c->device = parent->device;
  c->real = r;
  real->ncclCommUserRank(r, &c->rank);
  real->ncclCommCount(r, &c->nranks);
  c->ready = true;
  return c;
}

ncclComm_t real_comm(ncclComm* comm, const char* what) {
  if (comm->route == Route::Hier) return hier_real_comm(comm, what);
  std::lock_guard<std::mutex> g(comm->real_mu);
  if (comm->real || comm->route == Route::Real) return comm->real;
  if (comm->device < 0) {
    set_last_error(std::string(what) + ": needs the real NCCL, which has no host-memory backend "
                   "(communicator on the host backend, PEERLINK_NCCL_HOST_BACKEND)");
    return nullptr;
  }
  std::string why;
  const RealNccl* real = real_nccl(comm->opts.nccl_library, &why);
  // Every rank must take part in the id exchange below even when it cannot load the library, or
  // the others would wait for it: the status travels with the id.
  struct Msg {
    int32_t ok;
    ncclUniqueId id;
  } mine{}, all_root{};
  if (comm->rank == 0 && real) mine.ok = real->ncclGetUniqueId(&mine.id) == ncclSuccess;
  std::vector<Msg> all(comm->nranks);
  try {
    comm->pl->allgather_bytes(&mine, sizeof mine, all.data());
  } catch (const std::exception& e) {
    set_last_error(std::string(what) + ": exchanging the real NCCL id: " + e.what());
    return nullptr;
  }
  all_root = all[0];
  if (!real) {
    set_last_error(std::string(what) + ": needs the real NCCL, none could be opened: " + why);
    return nullptr;
  }
  if (!all_root.ok) {
    set_last_error(std::string(what) + ": rank 0 could not open the real NCCL or get its unique id");
    return nullptr;
  }
  ncclComm_t r = nullptr;
  ncclResult_t res = real->ncclCommInitRank(&r, comm->nranks, all_root.id, comm->rank);
  if (res != ncclSuccess) {
    set_last_error(std::string(what) + ": real ncclCommInitRank failed: " + real->ncclGetErrorString(res));
    return nullptr;
  }
  if (comm->log.info)
    log_line("INFO", "comm %p rank %d/%d: real NCCL communicator created for forwarded ops (%s)",
             static_cast<void*>(comm), comm->rank, comm->nranks, real->path.c_str());
  comm->real = r;
  return r;
}

namespace {

// A stream of the current device for the scope (none on the host backend).
struct ScopedStream {
  void* s = nullptr;
  explicit ScopedStream(bool gpu) : s(gpu ? device::stream_create() : nullptr) {}
  ~ScopedStream() {
    try {
      if (s) device::stream_destroy(s);
    } catch (...) {  // a destructor reports nothing
    }
  }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
};

// peerlink's group closed on every path (an exception inside still issues what was queued, so
// the peers' matching calls complete).
struct ScopedGroup {
  Communicator& c;
  bool open = true;
  explicit ScopedGroup(Communicator& comm) : c(comm) { c.group_start(); }
  void end() {
    open = false;
    c.group_end();
  }
  ~ScopedGroup() {
    try {
      if (open) c.group_end();
    } catch (...) {
    }
  }
  ScopedGroup(const ScopedGroup&) = delete;
  ScopedGroup& operator=(const ScopedGroup&) = delete;
};

}  // namespace

void apply_config(Options& o, const ncclConfig_t* config) {
  if (!config || config->size < offsetof(ncclConfig_t, maxCTAs) + sizeof(config->maxCTAs)) return;
  if (config->maxCTAs != NCCL_CONFIG_UNDEF_INT && config->maxCTAs > 0)
    o.max_blocks = std::min(config->maxCTAs, kMaxAllreduceBlocks);
}

void warm_p2p(ncclComm* comm) {
  comm->p2p_warm = comm->p2p_forward = false;
  if (comm->nranks == 1) {
    comm->p2p_warm = true;
    return;
  }
  ScopedStream stream(comm->device >= 0);
  std::string unsupported;
  {
    ScopedGroup group(*comm->pl);
    for (int p = 0; p < comm->nranks; ++p) {
      if (p == comm->rank) continue;
      try {
        comm->pl->send(p, nullptr, 0, stream.s);
        comm->pl->recv(p, nullptr, 0, stream.s);
      } catch (const UnsupportedError& e) {  // a relay pair: the same answer on both of its ranks
        unsupported = e.what();
      }
    }
    group.end();
  }
  if (stream.s) device::stream_sync(stream.s);
  comm->p2p_forward = !unsupported.empty();
  comm->p2p_warm = !comm->p2p_forward;
  if (comm->p2p_forward)
    log_line(comm->log.info ? "INFO" : "WARN",
             "comm %p rank %d/%d: send/recv forwarded to the real NCCL (%s)", static_cast<void*>(comm), comm->rank,
             comm->nranks, unsupported.c_str());
}

}  // namespace peerlink::nccl

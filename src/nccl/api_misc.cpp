// Groups, memory, registration, reduction ops, version and error strings.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "peerlink/windows.h"
#include "real_nccl.h"
#include "shim.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit

using namespace peerlink;
using namespace peerlink::nccl;

namespace {

// ncclCommRegister handles of peerlink communicators: peerlink takes any allocation of the device
// (its IPC cache maps a buffer once, registered or not), so a handle only has to be unique and
// checkable, so that a wrong or double deregistration is an error. (Windows are peerlink's
// registered windows, kept by their communicator: ncclComm::windows.)
std::mutex g_reg_mu;
std::set<void*> g_handles;

void* new_handle() {
  void* h = std::malloc(1);
  if (!h) throw std::bad_alloc();
  std::lock_guard<std::mutex> g(g_reg_mu);
  g_handles.insert(h);
  return h;
}

bool drop_handle(void* h) {
  std::lock_guard<std::mutex> g(g_reg_mu);
  if (!g_handles.erase(h)) return false;
  std::free(h);
  return true;
}

// ncclMemAlloc's host allocations (host backend), so that ncclMemFree knows which free to use.
std::mutex g_mem_mu;
std::set<void*> g_host_mem;

const RealNccl* real_of(const ncclComm* c) { return real_nccl(c->opts.nccl_library); }

}  // namespace

PL_NCCL_EXPORT ncclResult_t ncclGroupStart() { return group_start(); }
PL_NCCL_EXPORT ncclResult_t ncclGroupEnd() { return group_end(); }
PL_NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) { return group_simulate_end(simInfo); }

PL_NCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) {
    set_last_error("ncclMemAlloc: ptr is NULL");
    return ncclInvalidArgument;
  }
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  try {
    Options o = Options::from_env();
    if (o.nccl_host_backend || !device::compiled_with_gpu()) {
      void* p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
      if (!p) throw std::bad_alloc();
      std::lock_guard<std::mutex> g(g_mem_mu);
      g_host_mem.insert(p);
      *ptr = p;
      return ncclSuccess;
    }
    // Plain device memory: peerlink exports any allocation over IPC, and forwarded ops on the
    // real NCCL take it too (the real ncclMemAlloc's VMM memory would need peerlink's VMM path).
    *ptr = device::alloc(size);
    return ncclSuccess;
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclMemAlloc: ") + std::to_string(size) + " bytes: " + e.what());
    return result_of(e);
  }
}

PL_NCCL_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    if (g_host_mem.erase(ptr)) {
      std::free(ptr);
      return ncclSuccess;
    }
  }
  try {
    device::free(ptr);
    return ncclSuccess;
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclMemFree: ") + e.what());
    return result_of(e);
  }
}

PL_NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (ncclResult_t r = check_comm(comm, "ncclCommRegister")) return r;
  if (!handle || (size > 0 && !buff)) {
    set_last_error("ncclCommRegister: handle or buff is NULL");
    return ncclInvalidArgument;
  }
  if (comm->route == Route::Real) return real_of(comm)->ncclCommRegister(comm->real, buff, size, handle);
  try {
    *handle = new_handle();
    return ncclSuccess;
  } catch (const std::exception& e) {
    return result_of(e);
  }
}

PL_NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (ncclResult_t r = check_comm(comm, "ncclCommDeregister")) return r;
  if (comm->route == Route::Real) return real_of(comm)->ncclCommDeregister(comm->real, handle);
  if (!drop_handle(handle)) {
    set_last_error("ncclCommDeregister: unknown handle");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// Windows on a peerlink communicator are peerlink's registered windows (peerlink/windows.h): with
// NCCL_WIN_COLL_SYMMETRIC the program promises NCCL's symmetric contract (every rank passes a
// buffer of the window at the same offset), which is exactly what peerlink's zero-copy path of
// all_gather / all_to_all / broadcast needs. Without that flag NCCL promises no symmetric use, so
// the handle registers nothing with peerlink: a window there would make an asymmetric (legal) call
// an InvalidArgument. As in NCCL (2.28), registration is a group task: inside ncclGroupStart/End it
// runs at the group end, on its own helper thread when the group holds several communicators of
// this process (one thread driving two ranks' registrations would deadlock), ordered with the
// communicator's collectives. The handle is valid at once; its id is filled when it ran.
PL_NCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                   int winFlags) {
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowRegister")) return r;
  if (!win) {
    set_last_error("ncclCommWindowRegister: win is NULL");
    return ncclInvalidArgument;
  }
  *win = nullptr;
  if (!buff || size == 0) {  // as NCCL
    char what[96];
    snprintf(what, sizeof what, "ncclCommWindowRegister: invalid pointer %p / size %zu", buff, size);
    set_last_error(what);
    return ncclInvalidArgument;
  }
  if (comm->route == Route::Real) return real_of(comm)->ncclCommWindowRegister(comm->real, buff, size, win, winFlags);
  ncclComm::Window* w = nullptr;
  try {
    auto owned = std::make_unique<ncclComm::Window>();
    w = owned.get();
    w->buff = buff;
    w->size = size;
    std::lock_guard<std::mutex> g(comm->mu);
    comm->windows.emplace(w, std::move(owned));
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclCommWindowRegister: ") + e.what());
    return result_of(e);
  }
  *win = reinterpret_cast<ncclWindow_t>(w);
  // A multi-node communicator registers nothing: its node communicators and engines take any buffer.
  if (!(winFlags & NCCL_WIN_COLL_SYMMETRIC) || comm->route == Route::Hier) {
    if (comm->log.info)
      log_line("INFO", "comm %p rank %d/%d: window %p (%zu bytes, flags 0x%x): %s, no peerlink window "
               "(collectives on it run as on any buffer)", static_cast<void*>(comm), comm->rank, comm->nranks, buff,
               size, winFlags, comm->route == Route::Hier ? "a multi-node communicator" : "not symmetric");
    return ncclSuccess;
  }
  Op o;
  o.comm = comm;
  o.kind = OpKind::Collective;
  o.on_peerlink = false;  // waits on the host for every rank: never in group.cpp's serial batches
  o.run = [comm, w, buff, size]() -> ncclResult_t {
    try {
      uint64_t id = register_window(*comm->pl, buff, size);
      bool zc = window_zero_copy(*comm->pl, buff, size);
      {
        std::lock_guard<std::mutex> g(comm->mu);
        w->id = id;
      }
      if (comm->log.info)
        log_line("INFO", "comm %p rank %d/%d: window %p (%zu bytes) is peerlink window %llu: %s",
                 static_cast<void*>(comm), comm->rank, comm->nranks, buff, size, static_cast<unsigned long long>(id),
                 zc ? "zero-copy capable (all_gather, all_to_all, broadcast write into the peers' windows)"
                    : "not zero-copy capable (some rank's memory is not exportable): collectives on it run as on "
                      "any buffer");
      return ncclSuccess;
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclCommWindowRegister: ") + e.what());
      ncclResult_t r = result_of(e);
      if (r == ncclRemoteError) comm->async_error.store(r);
      return r;
    }
  };
  const bool deferred = in_group();
  ncclResult_t r = submit(std::move(o));
  if (r != ncclSuccess && !deferred) {  // ran and failed: the handle never existed
    std::lock_guard<std::mutex> g(comm->mu);
    comm->windows.erase(w);
    *win = nullptr;
  }
  return r;
}

// Collective as in NCCL; no exchange (peerlink's deregistration releases this rank's mappings
// only), queued in a group like the registration so that it follows the collectives queued before
// it. NULL is a no-op (as NCCL); a handle not of this communicator, or deregistered already, is
// ncclInvalidArgument at once.
PL_NCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowDeregister")) return r;
  if (comm->route == Route::Real) return real_of(comm)->ncclCommWindowDeregister(comm->real, win);
  if (!win) return ncclSuccess;
  const void* key = static_cast<const void*>(win);
  {
    std::lock_guard<std::mutex> g(comm->mu);
    auto it = comm->windows.find(key);
    if (it == comm->windows.end() || it->second->dropping) {
      set_last_error("ncclCommWindowDeregister: unknown window (not registered on this communicator, or "
                     "deregistered already)");
      return ncclInvalidArgument;
    }
    it->second->dropping = true;
  }
  Op o;
  o.comm = comm;
  o.kind = OpKind::Collective;
  o.on_peerlink = false;  // waits (bounded) for this rank's collectives on the window
  o.run = [comm, key]() -> ncclResult_t {
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> g(comm->mu);
      auto it = comm->windows.find(key);
      if (it != comm->windows.end()) id = it->second->id;
    }
    ncclResult_t r = ncclSuccess;
    try {
      if (id) deregister_window(*comm->pl, id);  // 0: nothing was registered with peerlink
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclCommWindowDeregister: ") + e.what());
      r = result_of(e);
      if (r == ncclRemoteError) comm->async_error.store(r);
    }
    if (comm->log.info && id)
      log_line("INFO", "comm %p rank %d/%d: peerlink window %llu deregistered%s", static_cast<void*>(comm),
               comm->rank, comm->nranks, static_cast<unsigned long long>(id), r == ncclSuccess ? "" : " (failed)");
    std::lock_guard<std::mutex> g(comm->mu);  // the handle is gone either way
    comm->windows.erase(key);
    return r;
  };
  return submit(std::move(o));
}

PL_NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                     ncclScalarResidence_t residence, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclRedOpCreatePreMulSum")) return r;
  size_t bytes = datatype == ncclFloat16 || datatype == ncclBfloat16 ? 2
                 : datatype == ncclFloat32 || datatype == ncclInt32 || datatype == ncclUint32 ? 4
                 : datatype == ncclFloat64 || datatype == ncclInt64 || datatype == ncclUint64 ? 8
                 : (datatype >= 0 && datatype < ncclNumTypes) ? 1 : 0;
  if (!op || !scalar || bytes == 0 ||
      (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)) {
    set_last_error("ncclRedOpCreatePreMulSum: op/scalar NULL or invalid datatype/residence");
    return ncclInvalidArgument;
  }
  if (comm->route == Route::Real)
    return real_of(comm)->ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, comm->real);
  // A placeholder now; the real op is made with the real communicator on first use (shim.h).
  std::lock_guard<std::mutex> g(comm->mu);
  // The smallest free id: programs create and destroy one per call (nccl-tests -o premulsum).
  int id = ncclNumOps;
  while (comm->premul.count(id)) ++id;
  ncclComm::PreMul p;
  p.dtype = datatype;
  p.residence = residence;
  if (residence == ncclScalarHostImmediate) p.scalar.assign(static_cast<char*>(scalar), static_cast<char*>(scalar) + bytes);
  else p.device_scalar = scalar;
  comm->premul.emplace(id, std::move(p));
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

PL_NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclRedOpDestroy")) return r;
  if (comm->route == Route::Real) return real_of(comm)->ncclRedOpDestroy(op, comm->real);
  std::lock_guard<std::mutex> g(comm->mu);
  auto it = comm->premul.find(op);
  if (it == comm->premul.end()) {
    set_last_error("ncclRedOpDestroy: op " + std::to_string(static_cast<int>(op)) + " was not created on this comm");
    return ncclInvalidArgument;
  }
  comm->premul.erase(it);  // ops already called hold their own copy
  return ncclSuccess;
}

PL_NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (!version) {
    set_last_error("ncclGetVersion: version is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;  // the header we implement (and that programs compiled against)
  return ncclSuccess;
}

PL_NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t code) {
  switch (code) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

PL_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;  // process-wide, as in NCCL
  thread_local std::string copy;
  copy = last_error();
  return copy.c_str();
}

PL_NCCL_EXPORT void ncclResetDebugInit() {
  // Deprecated in NCCL; our logging reads NCCL_DEBUG per communicator already, so nothing to reset.
}

// ncclCommSplit/Shrink, Finalize/Destroy/Abort/Revoke, GetAsyncError, Count/CuDevice/UserRank.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "hier_glue.h"
#include "real_nccl.h"
#include "shim.h"

using namespace peerlink;
using namespace peerlink::nccl;

namespace {

const RealNccl* real_of(const ncclComm* c) { return real_nccl(c->opts.nccl_library); }

// Splits a peerlink communicator: every rank of `parent` contributes (color, key); the members of
// one color, ordered by (key, parent rank), form a child with its own peerlink id derived from
// the parent's id, the split number and the color (the same on every member, distinct per split).
ncclResult_t split_peerlink(ncclComm* parent, int color, int key, ncclComm* child) {
  struct Entry {
    int32_t color, key;
  } mine{color, key};
  std::vector<Entry> all(parent->nranks);
  try {
    parent->pl->allgather_bytes(&mine, sizeof mine, all.data());
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclCommSplit: exchanging colors: ") + e.what());
    return result_of(e);
  }
  int n = parent->split_count++;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::vector<int> members;
  for (int r = 0; r < parent->nranks; ++r)
    if (all[r].color == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  child->nranks = static_cast<int>(members.size());
  child->rank = static_cast<int>(std::find(members.begin(), members.end(), parent->rank) - members.begin());
  child->pl_id = parent->pl_id + "s" + std::to_string(n) + "c" + std::to_string(color);
  try {
    child->pl = std::make_unique<Communicator>(child->pl_id, child->rank, child->nranks, child->device, child->opts);
    warm_p2p(child);
    child->ready = true;
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclCommSplit: peerlink: ") + e.what());
    return result_of(e);
  }
  if (child->log.info)
    log_line("INFO", "comm %p rank %d/%d: split of comm %p (color %d): peerlink", static_cast<void*>(child),
             child->rank, child->nranks, static_cast<void*>(parent), color);
  return ncclSuccess;
}

}  // namespace

PL_NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                          ncclConfig_t* config) {
  if (ncclResult_t r = check_comm(comm, "ncclCommSplit")) return r;
  if (!newcomm || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) {
    set_last_error("ncclCommSplit: newcomm NULL or color " + std::to_string(color) + " negative");
    return ncclInvalidArgument;
  }
  *newcomm = nullptr;
  if (comm->route == Route::Real) {
    Op op;
    op.comm = comm;
    op.run = [comm, color, key, newcomm, config]() -> ncclResult_t {
      ncclComm_t r = nullptr;
      ncclResult_t res = real_of(comm)->ncclCommSplit(comm->real, color, key, &r, config);
      if (res == ncclSuccess && r) *newcomm = wrap_real(comm, r);
      return res;
    };
    return submit(std::move(op));
  }
  ncclComm* child = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR) {
    child = new ncclComm;
    child->route = comm->route;  // a child of a multi-node parent may be one node's: split_hier decides
    child->opts = comm->opts;
    apply_config(child->opts, config);
    child->log = comm->log;
    child->device = comm->device;
    *newcomm = child;
  }
  Op op;
  op.comm = comm;
  op.run = [comm, color, key, child]() -> ncclResult_t {
    if (comm->route == Route::Hier) return split_hier(comm, color, key, child);
    ncclComm scratch;  // the NOCOLOR rank's stand-in: takes part in the exchange, creates nothing
    return split_peerlink(comm, color, key, child ? child : &scratch);
  };
  return submit(std::move(op));
}

PL_NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                           ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (ncclResult_t r = check_comm(comm, "ncclCommShrink")) return r;
  if (!newcomm || (excludeRanksCount > 0 && !excludeRanksList)) {
    set_last_error("ncclCommShrink: newcomm or excludeRanksList NULL");
    return ncclInvalidArgument;
  }
  if (comm->route == Route::Real) {
    ncclComm_t r = nullptr;
    ncclResult_t res =
        real_of(comm)->ncclCommShrink(comm->real, excludeRanksList, excludeRanksCount, &r, config, shrinkFlags);
    *newcomm = (res == ncclSuccess && r) ? wrap_real(comm, r) : nullptr;
    return res;
  }
  // The surviving ranks call this (the excluded ones do not, and may be dead): no exchange with the
  // parent's ranks. Every survivor derives the same child alone: ranks renumbered in parent order
  // without the excluded ones, a peerlink id from the parent's id, the shrink number and the list.
  std::vector<int> excl(excludeRanksList, excludeRanksList + std::max(excludeRanksCount, 0));
  std::sort(excl.begin(), excl.end());
  for (size_t i = 0; i < excl.size(); ++i) {
    if (excl[i] < 0 || excl[i] >= comm->nranks || (i > 0 && excl[i] == excl[i - 1]) || excl[i] == comm->rank) {
      set_last_error("ncclCommShrink: excluded rank " + std::to_string(excl[i]) + " is out of [0, " +
                     std::to_string(comm->nranks) + "), repeated, or this rank (" + std::to_string(comm->rank) + ")");
      return ncclInvalidArgument;
    }
  }
  if (excl.size() >= static_cast<size_t>(comm->nranks)) {
    set_last_error("ncclCommShrink: every rank excluded");
    return ncclInvalidArgument;
  }
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    set_last_error("ncclCommShrink: shrinkFlags " + std::to_string(shrinkFlags) + " is not NCCL_SHRINK_DEFAULT or _ABORT");
    return ncclInvalidArgument;
  }
  // NCCL_SHRINK_ABORT: no host-side work to abort.
  auto* child = new ncclComm;
  child->route = comm->route;
  child->opts = comm->opts;
  apply_config(child->opts, config);
  child->log = comm->log;
  child->device = comm->device;
  child->nranks = comm->nranks - static_cast<int>(excl.size());
  child->rank = comm->rank - static_cast<int>(std::lower_bound(excl.begin(), excl.end(), comm->rank) - excl.begin());
  child->pl_id = comm->pl_id + "k" + std::to_string(comm->shrink_count++) + "x";
  for (int r : excl) child->pl_id += std::to_string(r) + ".";
  *newcomm = child;
  Op op;
  op.comm = comm;
  op.kind = OpKind::Init;
  op.run = [comm, child, excl]() -> ncclResult_t {
    if (comm->route == Route::Hier) return shrink_hier(comm, excl, child);
    try {
      child->pl = std::make_unique<Communicator>(child->pl_id, child->rank, child->nranks, child->device, child->opts);
      warm_p2p(child);
      child->ready = true;
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclCommShrink: peerlink: ") + e.what());
      child->init_result = result_of(e);
      return child->init_result;
    }
    if (child->log.info)
      log_line("INFO", "comm %p rank %d/%d: shrink of comm %p: peerlink", static_cast<void*>(child), child->rank,
               child->nranks, static_cast<void*>(comm));
    return ncclSuccess;
  };
  return submit(std::move(op));
}

PL_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommFinalize", &unusable)) return real->ncclCommFinalize(comm);
  if (unusable) return ncclInvalidArgument;
  if (!comm) {
    set_last_error("ncclCommFinalize: comm is NULL");
    return ncclInvalidArgument;
  }
  // peerlink's ops hold no host-side work after they return (stream-ordered or synchronous), so
  // there is nothing to flush; the real communicator, if any, finalizes its own.
  if (comm->hier) {
    try {
      comm->hier->finalize();
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclCommFinalize: ") + e.what());
      return result_of(e);
    }
  }
  if (comm->real) return real_of(comm)->ncclCommFinalize(comm->real);
  return ncclSuccess;
}

static ncclResult_t destroy(ncclComm_t comm, bool abort, const char* what) {
  if (!comm) {
    set_last_error(std::string(what) + ": comm is NULL");
    return ncclInvalidArgument;
  }
  ncclResult_t res = ncclSuccess;
  if (comm->pl) {
    try {
      if (abort) comm->pl->close();  // wakes the calls of other threads blocked in a wait
      comm->pl.reset();
    } catch (const std::exception& e) {
      set_last_error(std::string(what) + ": peerlink: " + e.what());
      res = result_of(e);
    }
  }
  if (comm->hier) {
    try {
      if (abort) comm->hier->abort();  // wakes other threads' waits, stops the engines' work
      comm->hier.reset();
    } catch (const std::exception& e) {
      set_last_error(std::string(what) + ": " + e.what());
      if (res == ncclSuccess) res = result_of(e);
    }
  }
  if (comm->real) {
    const RealNccl* real = real_of(comm);
    ncclResult_t r = abort ? real->ncclCommAbort(comm->real) : real->ncclCommDestroy(comm->real);
    if (res == ncclSuccess) res = r;
  }
  if (comm->log.info) log_line("INFO", "comm %p rank %d/%d: %s", static_cast<void*>(comm), comm->rank, comm->nranks, what);
  delete comm;
  return res;
}

ncclComm::~ncclComm() {
  if (stage) old_stages.push_back(stage);
  for (void* p : old_stages) {
    try {
      if (device < 0) std::free(p);
      else device::free(p);
    } catch (...) {  // a destructor reports nothing; the device is likely gone already
    }
  }
}

PL_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommDestroy", &unusable)) return real->ncclCommDestroy(comm);
  return unusable ? ncclInvalidArgument : destroy(comm, false, "ncclCommDestroy");
}
PL_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommAbort", &unusable)) return real->ncclCommAbort(comm);
  return unusable ? ncclInvalidArgument : destroy(comm, true, "ncclCommAbort");
}

PL_NCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommRevoke", &unusable)) return real->ncclCommRevoke(comm, revokeFlags);
  if (unusable) return ncclInvalidArgument;
  if (ncclResult_t r = check_comm(comm, "ncclCommRevoke")) return r;
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    set_last_error("ncclCommRevoke: revokeFlags " + std::to_string(revokeFlags) + " must be 0");
    return ncclInvalidArgument;
  }
  ncclResult_t res = ncclSuccess;
  if (comm->pl) {
    try {
      comm->pl->close();  // later ops fail (InvalidArgument "closed"); destroy/abort still work
    } catch (const std::exception& e) {
      res = result_of(e);
    }
  }
  if (comm->hier) {
    try {
      comm->hier->revoke();
    } catch (const std::exception& e) {
      if (res == ncclSuccess) res = result_of(e);
    }
  }
  if (comm->real) {
    ncclResult_t r = real_of(comm)->ncclCommRevoke(comm->real, revokeFlags);
    if (res == ncclSuccess) res = r;
  }
  return res;
}

PL_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommGetAsyncError", &unusable)) return real->ncclCommGetAsyncError(comm, asyncError);
  if (unusable) return ncclInvalidArgument;
  if (!comm || !asyncError) {
    set_last_error("ncclCommGetAsyncError: comm or asyncError is NULL");
    return ncclInvalidArgument;
  }
  if (!comm->ready) {
    *asyncError = comm->init_result;
    return ncclSuccess;
  }
  // Device-side timeouts and lost peers of peerlink's stream-ordered collectives and send/recv are
  // recorded on the device and surface here (allreduce_check, check_async_error: both safe beside
  // the program's own calls on other threads), as NCCL reports its own asynchronous errors.
  // A revoked (closed) communicator has nothing in flight to report.
  if (comm->pl && !comm->pl->closed() && comm->async_error.load() == ncclSuccess) {
    try {
      if (comm->used_collectives) allreduce_check(*comm->pl);
      comm->pl->check_async_error();
    } catch (const std::exception& e) {
      if (!comm->pl->closed()) {  // else closed by another thread meanwhile: "closed" is no async error
        set_last_error(std::string("async error: ") + e.what());
        comm->async_error.store(result_of(e));
      }
    }
  }
  // Both sides of a multi-node communicator: peerlink's (node communicator) and the engines'.
  if (comm->hier && comm->async_error.load() == ncclSuccess) {
    try {
      comm->hier->check_async_error();
    } catch (const std::exception& e) {
      set_last_error(std::string("async error: ") + e.what());
      comm->async_error.store(result_of(e));
    }
  }
  if (comm->real && comm->async_error.load() == ncclSuccess) {
    ncclResult_t r = ncclSuccess;
    ncclResult_t q = real_of(comm)->ncclCommGetAsyncError(comm->real, &r);
    if (q != ncclSuccess) return q;
    if (r != ncclSuccess && r != ncclInProgress) comm->async_error.store(r);
    if (r == ncclInProgress) {
      *asyncError = r;
      return ncclSuccess;
    }
  }
  *asyncError = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

PL_NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommCount", &unusable)) return real->ncclCommCount(comm, count);
  if (unusable) return ncclInvalidArgument;
  if (ncclResult_t r = check_comm(comm, "ncclCommCount")) return r;
  if (!count) {
    set_last_error("ncclCommCount: count is NULL");
    return ncclInvalidArgument;
  }
  *count = comm->nranks;
  return ncclSuccess;
}

PL_NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommCuDevice", &unusable)) return real->ncclCommCuDevice(comm, device);
  if (unusable) return ncclInvalidArgument;
  if (ncclResult_t r = check_comm(comm, "ncclCommCuDevice")) return r;
  if (!device) {
    set_last_error("ncclCommCuDevice: device is NULL");
    return ncclInvalidArgument;
  }
  *device = comm->device;
  return ncclSuccess;
}

PL_NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  bool unusable;
  if (const RealNccl* real = foreign_comm(comm, "ncclCommUserRank", &unusable)) return real->ncclCommUserRank(comm, rank);
  if (unusable) return ncclInvalidArgument;
  if (ncclResult_t r = check_comm(comm, "ncclCommUserRank")) return r;
  if (!rank) {
    set_last_error("ncclCommUserRank: rank is NULL");
    return ncclInvalidArgument;
  }
  *rank = comm->rank;
  return ncclSuccess;
}

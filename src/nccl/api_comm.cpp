// Communicator lifetime and queries: ncclGetUniqueId, ncclCommInit*, ncclCommSplit/Shrink,
// ncclCommFinalize/Destroy/Abort/Revoke, ncclCommGetAsyncError, ncclCommCount/CuDevice/UserRank.
//
// Routing (the same answer on every rank):
//   - an id without our magic (made by a real NCCL elsewhere)            -> real NCCL, id as is
//   - our id (ncclGetUniqueId): every rank meets the others through the TCP rendezvous the id
//     names (hier_glue.h) and learns the node map: one node -> peerlink; several nodes -> peerlink
//     inside each node and the real NCCL between them (peerlink::HierCommunicator)
//   - our id made by ncclCommInitAll (every rank in this process)       -> peerlink, no meeting
//   - our id without a rendezvous address (an older library made it): its host decides, as before:
//     made on this host -> peerlink, else the real NCCL through the embedded real id
#include <cstring>

#include "hier_glue.h"
#include "real_nccl.h"
#include "shim.h"
#include "unique_id.h"

using namespace peerlink;
using namespace peerlink::nccl;

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

const RealNccl* need_real(const Options& o, const char* what) {
  std::string why;
  const RealNccl* r = real_nccl(o.nccl_library, &why);
  if (!r) set_last_error(std::string(what) + ": the real NCCL is needed and could not be opened: " + why);
  return r;
}

ncclResult_t check_init_args(ncclComm_t* out, int nranks, int rank, const ncclConfig_t* config, const char* what) {
  if (!out) {
    set_last_error(std::string(what) + ": comm is NULL");
    return ncclInvalidArgument;
  }
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    set_last_error(std::string(what) + ": rank " + std::to_string(rank) + " of nranks " + std::to_string(nranks) +
                   " is out of range");
    return ncclInvalidArgument;
  }
  if (config && (config->magic != kConfigMagic || config->size < offsetof(ncclConfig_t, blocking))) {
    set_last_error(std::string(what) + ": config not initialised with NCCL_CONFIG_INITIALIZER (magic " +
                   std::to_string(config->magic) + ")");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// Options (environment, then the config), rank, size and device of a new communicator.
ncclResult_t describe_comm(ncclComm& c, int nranks, int rank, const ncclConfig_t* config, const char* what) {
  try {
    c.opts = Options::from_env();
    apply_config(c.opts, config);
  } catch (const std::exception& e) {
    set_last_error(std::string(what) + ": " + e.what());
    return result_of(e);
  }
  c.log = Log::from(c.opts);
  c.rank = rank;
  c.nranks = nranks;
  bool host = c.opts.nccl_host_backend || !device::compiled_with_gpu();
  try {
    c.device = host ? kHostDevice : device::current();
  } catch (const std::exception& e) {
    set_last_error(std::string(what) + ": current device: " + e.what());
    return result_of(e);
  }
  return ncclSuccess;
}

// The route the id decides (api_comm.cpp's header); *real_id is the id the real NCCL is given.
ncclResult_t route_by_id(ncclComm& c, const IdInfo& info, bool meet, ncclUniqueId* real_id, const RealNccl** real,
                         const char* what) {
  if (!info.ours) {
    c.route = Route::Real;
  } else if (meet || info.one_process || info.host == host_id(c.opts)) {
    c.route = Route::Peerlink;  // a meeting may still make it Route::Hier (init_by_meeting)
    c.pl_id = "nccl" + info.nonce_hex;
  } else {
    c.route = Route::Real;
    if (!info.has_real) {
      set_last_error(std::string(what) + ": the unique id comes from another host and carries no real NCCL id "
                     "(its maker could not open the real NCCL): cannot create a multi-node communicator");
      return ncclInvalidUsage;
    }
    *real_id = info.real;
  }
  if (c.route != Route::Real) return ncclSuccess;
  if (c.device < 0) {
    set_last_error(std::string(what) + ": communicator routed to the real NCCL on the host backend");
    return ncclInvalidUsage;
  }
  return (*real = need_real(c.opts, what)) ? ncclSuccess : ncclInvalidUsage;
}

void log_route(const ncclComm& c, const IdInfo& info, const char* what) {
  if (!c.log.info) return;
  log_line("INFO", "comm %p rank %d/%d device %d: %s%s%s", static_cast<const void*>(&c), c.rank, c.nranks, c.device,
           c.route == Route::Peerlink
               ? "peerlink (all ranks on this node)"
               : (info.ours ? "real NCCL (the id was made on another node)" : "real NCCL (a real NCCL unique id)"),
           in_group() ? ", created at ncclGroupEnd" : "",
           c.route == Route::Peerlink && c.opts.max_blocks > 0
               ? (", at most " + std::to_string(c.opts.max_blocks) + " blocks per kernel (maxCTAs)").c_str()
               : "");
}

// What creates the communicator: now, or at ncclGroupEnd inside a group (submit decides).
Op init_op(ncclComm* raw, const RealNccl* real, const ncclUniqueId& real_id, ncclConfig_t* config, const IdInfo& info,
           bool meet, const char* what) {
  // A copy of the config that outlives the caller's (the init may run at ncclGroupEnd).
  bool copy_cfg = config && config->size == sizeof(ncclConfig_t);
  ncclConfig_t cfg{};
  if (copy_cfg) cfg = *config;
  Op op;
  op.comm = raw;
  op.kind = OpKind::Init;
  op.run = [raw, real, real_id, cfg, copy_cfg, config, what, info, meet]() mutable -> ncclResult_t {
    if (meet) return init_by_meeting(raw, info, copy_cfg ? &cfg : nullptr, what);
    if (raw->route == Route::Real) {
      ncclResult_t r = real->ncclCommInitRankConfig(&raw->real, raw->nranks, real_id, raw->rank,
                                                    copy_cfg ? &cfg : config);
      raw->init_result = r;
      // A nonblocking config (blocking = 0) answers ncclInProgress: usable once the real NCCL's
      // ncclCommGetAsyncError says so, which ours forwards.
      raw->ready = r == ncclSuccess || r == ncclInProgress;
      if (r != ncclSuccess && r != ncclInProgress) set_last_error(std::string(what) + ": real NCCL: " + real->ncclGetErrorString(r));
      return r;
    }
    try {
      raw->pl = std::make_unique<Communicator>(raw->pl_id, raw->rank, raw->nranks, raw->device, raw->opts);
      warm_p2p(raw);
      raw->ready = true;
      return ncclSuccess;
    } catch (const std::exception& e) {
      set_last_error(std::string(what) + ": peerlink: " + e.what());
      raw->init_result = result_of(e);
      return raw->init_result;
    }
  };
  return op;
}

ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, ncclConfig_t* config,
                       const char* what) {
  if (ncclResult_t r = check_init_args(out, nranks, rank, config, what)) return r;
  auto c = std::make_unique<ncclComm>();
  if (ncclResult_t r = describe_comm(*c, nranks, rank, config, what)) return r;
  IdInfo info = parse_id(id);
  ncclUniqueId real_id = id;
  const bool meet = info.ours && info.has_rendezvous && !info.one_process;
  const RealNccl* real = nullptr;
  if (ncclResult_t r = route_by_id(*c, info, meet, &real_id, &real, what)) return r;
  if (!meet) log_route(*c, info, what);
  ncclComm* raw = c.release();
  *out = raw;
  return submit(init_op(raw, real, real_id, config, info, meet, what));
}

// An id of this library: a real NCCL id embedded where the real NCCL can be loaded (GPU builds),
// and the address of a fresh rendezvous service unless every rank is in this process.
ncclResult_t make_our_id(ncclUniqueId* out, bool one_process, const char* what) {
  try {
    Options o = Options::from_env();
    // Not on the host backend: no GPU, the real NCCL is of no use there (and CI need not have it).
    ncclUniqueId real_id;
    bool have_real = false;
    if (!o.nccl_host_backend && device::compiled_with_gpu()) {
      std::string why;
      if (const RealNccl* r = real_nccl(o.nccl_library, &why)) have_real = r->ncclGetUniqueId(&real_id) == ncclSuccess;
      else if (Log::from(o).info) log_line("INFO", "%s: no real NCCL id embedded: %s", what, why.c_str());
    }
    JobNonce nonce = random_nonce();
    RendezvousAddress address{};
    if (!one_process) address = start_rendezvous(nonce, o);
    *out = make_id(have_real ? &real_id : nullptr, host_id(o), nonce, one_process ? nullptr : &address, one_process);
    if (!one_process && Log::from(o).info)
      log_line("INFO", "%s: rendezvous of the ranks at %s", what, describe_rendezvous(address).c_str());
    return ncclSuccess;
  } catch (const std::exception& e) {
    set_last_error(std::string(what) + ": " + e.what());
    return result_of(e);
  }
}

}  // namespace

PL_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) {
    set_last_error("ncclGetUniqueId: uniqueId is NULL");
    return ncclInvalidArgument;
  }
  return make_our_id(uniqueId, false, "ncclGetUniqueId");
}

PL_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
}

PL_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                   ncclConfig_t* config) {
  return init_rank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
}

PL_NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                     ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || !commIds) {
    set_last_error("ncclCommInitRankScalable: nId " + std::to_string(nId) + " / commIds NULL");
    return ncclInvalidArgument;
  }
  // Every id names the same communicator; ours need one (the first), a real one is passed whole.
  IdInfo info = parse_id(commIds[0]);
  if (!info.ours && nId > 1) {
    Options o;
    try {
      o = Options::from_env();
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclCommInitRankScalable: ") + e.what());
      return result_of(e);
    }
    const RealNccl* real = need_real(o, "ncclCommInitRankScalable");
    if (!real) return ncclInvalidUsage;
    ncclComm_t r = nullptr;
    ncclResult_t res = real->ncclCommInitRankScalable(&r, nranks, myrank, nId, commIds, config);
    if (res != ncclSuccess) return res;
    ncclComm parent;
    parent.opts = o;
    try {
      parent.device = device::current();
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclCommInitRankScalable: current device: ") + e.what());
    }
    *newcomm = wrap_real(&parent, r);
    return ncclSuccess;
  }
  return init_rank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
}

PL_NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) {
    set_last_error("ncclCommInitAll: comms NULL or ndev " + std::to_string(ndev) + " < 1");
    return ncclInvalidArgument;
  }
  ncclUniqueId id;
  ncclResult_t r = make_our_id(&id, true, "ncclCommInitAll");
  if (r != ncclSuccess) return r;
  int prev = -1;
  try {
    prev = device::current();
  } catch (...) {
  }
  group_start();
  for (int i = 0; i < ndev && r == ncclSuccess; ++i) {
    try {
      if (device::compiled_with_gpu() && prev >= 0) device::set_current(devlist ? devlist[i] : i);
    } catch (const std::exception& e) {
      set_last_error(std::string("ncclCommInitAll: device ") + std::to_string(devlist ? devlist[i] : i) + ": " +
                     e.what());
      r = result_of(e);
      break;
    }
    r = init_rank(comms + i, ndev, id, i, nullptr, "ncclCommInitAll");
  }
  ncclResult_t e = group_end();
  try {
    if (prev >= 0) device::set_current(prev);
  } catch (...) {
  }
  return r != ncclSuccess ? r : e;
}

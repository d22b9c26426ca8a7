// Multi-node communicators of libnccl.so.2 (hier_glue.h).
//
// The inter-node engine: the real NCCL on GPUs (a world communicator made from the real id the
// unique id carries, rails split from it), the shared-memory stand-in on the host backend (CI). The
// real library is loaded before the ranks agree, so a rank that cannot load it fails every rank at
// once, before any of them enters the real NCCL's init (which would wait for it without bound).
#include "hier_glue.h"

#include "nccl_engine.h"
#include "real_nccl.h"

namespace peerlink::nccl {
namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

EngineFactory world_engine(ncclComm* c, const IdInfo& info, const ncclConfig_t* user_cfg, const std::string& job,
                           const NodeMap& map) {
  EngineFactory f;
  if (c->device < 0 && !c->opts.test_hier_real_engine) {
    f.prepare = [map]() -> std::string {
      for (int n = 1; n < map.nodes(); ++n)
        if (map.machine_of_node(n) != map.machine_of_node(0))
          return "the host backend's inter-node stand-in (shared memory) needs every rank on one machine; node " +
                 std::to_string(n) + " (" + map.name_of_node(n) + ") runs on another";
      return "";
    };
    f.create = [c, job] { return make_host_engine(job + ".w", c->rank, c->nranks, c->opts); };
    return f;
  }
  f.prepare = [c, info]() -> std::string {
    std::string why;
    if (!real_nccl(c->opts.nccl_library, &why))
      return "the real NCCL carries the data between nodes and could not be loaded: " + why +
             " (set PEERLINK_NCCL_LIBRARY to the real libnccl.so.2)";
    if (!info.has_real) return "the unique id carries no real NCCL id (the process that made it could not load the real NCCL)";
    if (c->device < 0) return "the real NCCL cannot move host memory (a communicator of the host backend)";
    return "";
  };
  // The world communicator is made blocking whatever the program asked (the rails are split from
  // it right after); the program's other settings apply.
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  if (user_cfg && user_cfg->magic == kConfigMagic && user_cfg->size == sizeof(ncclConfig_t)) cfg = *user_cfg;
  cfg.blocking = 1;
  f.create = [c, info, cfg]() mutable -> std::unique_ptr<InterNodeEngine> {
    const RealNccl* r = real_nccl(c->opts.nccl_library);
    ncclComm_t rc = nullptr;
    ncclResult_t res = r->ncclCommInitRankConfig(&rc, c->nranks, info.real, c->rank, &cfg);
    if (res != ncclSuccess)
      throw Error(std::string("real ncclCommInitRankConfig (the world communicator between nodes): ") +
                  r->ncclGetErrorString(res));
    return make_nccl_engine(r, rc, c->device);
  };
  return f;
}

void created(ncclComm* c, const char* how) {
  if (c->log.info && c->hier)
    log_line("INFO", "comm %p rank %d/%d device %d: %s: %s", static_cast<void*>(c), c->rank, c->nranks, c->device, how,
             c->hier->describe().c_str());
  else if (c->log.info)
    log_line("INFO", "comm %p rank %d/%d device %d: %s: peerlink (all ranks on one node)", static_cast<void*>(c),
             c->rank, c->nranks, c->device, how);
}

}  // namespace

ncclResult_t init_by_meeting(ncclComm* c, const IdInfo& info, const ncclConfig_t* cfg, const char* what) {
  try {
    std::unique_ptr<Meeting> meeting = connect_rendezvous(info.rendezvous, info.nonce, c->rank, c->nranks, c->opts);
    NodeMap map = meeting->meet();
    if (c->log.info)
      log_line("INFO", "comm %p rank %d/%d: node map (rendezvous at %s): %s", static_cast<void*>(c), c->rank,
               c->nranks, describe_rendezvous(info.rendezvous).c_str(), map.describe().c_str());
    const std::string job = "nccl" + info.nonce_hex;
    c->pl_id = job;
    if (map.nodes() == 1) {
      c->route = Route::Peerlink;
      c->pl = std::make_unique<Communicator>(job, c->rank, c->nranks, c->device, c->opts);
      warm_p2p(c);
    } else {
      c->route = Route::Hier;
      HierSetup s;
      s.rank = c->rank;
      s.nranks = c->nranks;
      s.device = c->device;
      s.job_id = job;
      s.map = map;
      s.opts = c->opts;
      c->hier = HierCommunicator::create(std::move(s), *meeting, world_engine(c, info, cfg, job, map));
    }
    c->ready = true;
    created(c, what);
    return ncclSuccess;
  } catch (const std::exception& e) {
    set_last_error(std::string(what) + ": " + e.what());
    c->init_result = result_of(e);
    return c->init_result;
  }
}

namespace {

ncclResult_t adopt(ncclComm* parent, HierCommunicator::Child r, ncclComm* child, const char* what) {
  child->rank = r.rank;
  child->nranks = r.nranks;
  child->pl_id = r.job_id;
  if (r.node_only) {
    child->route = Route::Peerlink;
    child->pl = std::move(r.node_only);
    warm_p2p(child);  // every member of a one-node child got one: collective among them
  } else {
    child->route = Route::Hier;
    child->hier = std::move(r.hier);
  }
  child->ready = true;
  created(child, what);
  return ncclSuccess;
}

}  // namespace

ncclResult_t split_hier(ncclComm* parent, int color, int key, ncclComm* child) {
  try {
    HierCommunicator::Child r = parent->hier->split(color, key, child ? child->opts : parent->opts);
    if (!child) return ncclSuccess;
    return adopt(parent, std::move(r), child, "ncclCommSplit");
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclCommSplit: ") + e.what());
    if (child) child->init_result = result_of(e);
    return result_of(e);
  }
}

ncclResult_t shrink_hier(ncclComm* parent, const std::vector<int>& excluded, ncclComm* child) {
  try {
    return adopt(parent, parent->hier->shrink(excluded, child->opts), child, "ncclCommShrink");
  } catch (const std::exception& e) {
    set_last_error(std::string("ncclCommShrink: ") + e.what());
    child->init_result = result_of(e);
    return child->init_result;
  }
}

ncclComm_t hier_real_comm(ncclComm* c, const char* what) {
  ncclComm_t rc = nccl_engine_comm(c->hier->world());
  if (!rc)
    set_last_error(std::string(what) + ": needs the real NCCL, which has no host-memory backend (a multi-node "
                   "communicator on the host backend runs peerlink's types and ops only)");
  return rc;
}

}  // namespace peerlink::nccl

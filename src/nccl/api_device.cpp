// NCCL's device API on the shim: a communicator routed to the real NCCL passes through; a peerlink
// communicator refuses with ncclInvalidUsage. Forwarding to a lazily created real communicator
// would be silently wrong: the device communicator reaches the windows of ncclCommWindowRegister,
// and on a peerlink communicator those are peerlink's, unknown to the real NCCL.
#include "device_api.h"
#include "real_nccl.h"
#include "shim.h"

using namespace peerlink::nccl;

namespace {

ncclResult_t refuse(ncclComm_t comm, const char* what) {
  set_last_error(std::string(what) + ": NCCL's device API is not available on a peerlink communicator (rank " +
                 std::to_string(comm->rank) + " of " + std::to_string(comm->nranks) +
                 ", all ranks on this node); its windows are peerlink's, so the call cannot be forwarded to "
                 "the real NCCL. Load the real libnccl.so.2 for programs that use ncclDevComm");
  return ncclInvalidUsage;
}

template <class Fn, class... Args>
ncclResult_t pass_through(ncclComm_t comm, const char* what, Fn RealNccl::*fn, Args... args) {
  const RealNccl* real = real_nccl(comm->opts.nccl_library);
  if (!real || !(real->*fn)) {
    set_last_error(std::string(what) + ": the real NCCL " + (real ? "(" + real->path + ") lacks it" : "is not loaded"));
    return ncclInvalidUsage;
  }
  return (real->*fn)(comm->real, args...);
}

}  // namespace

PL_NCCL_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements* reqs, ncclDevComm* out) {
  if (ncclResult_t r = check_comm(comm, "ncclDevCommCreate")) return r;
  if (comm->route == Route::Real) return pass_through(comm, "ncclDevCommCreate", &RealNccl::ncclDevCommCreate, reqs, out);
  return refuse(comm, "ncclDevCommCreate");
}

PL_NCCL_EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm* dev_comm) {
  if (ncclResult_t r = check_comm(comm, "ncclDevCommDestroy")) return r;
  if (comm->route == Route::Real) return pass_through(comm, "ncclDevCommDestroy", &RealNccl::ncclDevCommDestroy, dev_comm);
  return refuse(comm, "ncclDevCommDestroy");
}

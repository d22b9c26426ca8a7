// The real NCCL, opened with dlopen: PEERLINK_NCCL_LIBRARY (Options::nccl_library) first, then
// beside the libraries the process loaded (the torch wheel's nvidia/nccl/lib), then the usual
// install places, never this library itself (compared by realpath with dladdr of our own
// code: a soname lookup of "libnccl.so.2" would return us, so only absolute paths are tried).
// Opened with RTLD_LOCAL | RTLD_DEEPBIND so that the real library's calls to its own public
// functions bind to itself, not to the shim that exports the same names.
#pragma once
#include <nccl.h>

#include "device_api.h"

#include <string>

namespace peerlink::nccl {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit is in the table
struct RealNccl {
#define PL_REAL_FN(name) decltype(&::name) name = nullptr;
#include "real_fns.inc"
  PL_REAL_FN(ncclDevCommCreate)  // device API (device_api.h): not in nccl.h, null in an older NCCL
  PL_REAL_FN(ncclDevCommDestroy)
#undef PL_REAL_FN
  std::string path;  // what was opened
};
#pragma GCC diagnostic pop

// Null when no real NCCL could be opened (`why` says what was tried). The first call decides,
// with the library path of the first Options that asks (one real NCCL per process).
const RealNccl* real_nccl(const std::string& configured_path, std::string* why = nullptr);

// The real NCCL if real_nccl() has opened it, else null; never loads it. A communicator of the real
// library can only exist once it is open (shim.h, foreign_comm).
const RealNccl* real_nccl_if_loaded();

}  // namespace peerlink::nccl

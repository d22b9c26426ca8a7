// The real NCCL as the inter-node engine of a multi-node communicator (peerlink/multinode.h
// InterNodeEngine): a real NCCL communicator of the library real_nccl.h loaded (never this one),
// driven through its function table. It lives here, beside nccl.h and the table, so that
// libpeerlink.so needs neither: the hier layer sees only the interface.
#pragma once
#include <nccl.h>

#include <memory>

#include "peerlink/multinode.h"
#include "real_nccl.h"

namespace peerlink::nccl {

// Owns `comm` (destroyed with the engine unless aborted first). `device`: the CUDA device of its
// buffers (the exchange's staging lives there).
std::unique_ptr<InterNodeEngine> make_nccl_engine(const RealNccl* real, ncclComm_t comm, int device);
// The real communicator behind an engine made above, null for any other engine (the stand-in):
// ops that peerlink does not run (int8, fp8, PreMulSum, ...) go to it whole.
ncclComm_t nccl_engine_comm(InterNodeEngine& engine);

}  // namespace peerlink::nccl

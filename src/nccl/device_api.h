// The host functions of NCCL's device API (nccl_device/core.h, NCCL 2.28) that programs import
// from libnccl.so.2: torch 2.11's libtorch_cuda.so needs ncclDevCommCreate / ncclDevCommDestroy to
// load at all (on 2x H200: "undefined symbol: ncclDevCommDestroy" with the shim
// preloaded). nccl_device/core.h itself needs the CUDA compiler's __host__; the argument types are
// only passed through, so incomplete declarations of NCCL's own struct names suffice.
#pragma once
#include <nccl.h>

extern "C" {
struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements* reqs, ncclDevComm* out);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm* dev_comm);
}

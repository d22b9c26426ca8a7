// How a failed GPU runtime call is reported: GpuError with the runtime's code, the call's name and
// a message that names the call, the runtime's error name and string, and the device. Formatting
// is separate from the runtime so that it is testable without a GPU (tests/unit/gpu_owners_test).
#pragma once
#include <string>

#include "peerlink/errors.h"

namespace peerlink::gpu {

// "cudaMalloc failed on device 1: out of memory (cudaErrorMemoryAllocation, code 2)".
// device < 0: the thread had no current device ("on an unknown device").
inline std::string format_gpu_error(const std::string& call, int code, const char* name, const char* text,
                                    int device) {
  std::string m = call + " failed on ";
  m += device >= 0 ? "device " + std::to_string(device) : std::string("an unknown device");
  m += ": ";
  m += text && *text ? text : "unknown error";
  m += " (";
  if (name && *name) m += std::string(name) + ", ";
  m += "code " + std::to_string(code) + ")";
  // Code 3 is the runtime's and the driver's "initialization error" (CUDA and HIP alike). Its usual
  // cause in a multi-process job: the process was forked from one that had already used the GPU
  // (as when fork-based tests run after a test that used CUDA in the parent).
  if (code == 3)
    m += "; a process forked after its parent used the GPU cannot use it: start the ranks with spawn "
         "(or before the parent's first GPU call)";
  return m;
}

inline GpuError make_gpu_error(const std::string& call, int code, const char* name, const char* text, int device) {
  return GpuError(format_gpu_error(call, code, name, text, device), code, call);
}

}  // namespace peerlink::gpu

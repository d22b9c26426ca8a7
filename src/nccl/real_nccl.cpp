// dlopen of the real NCCL (real_nccl.h says which places and why absolute paths only).
#include "real_nccl.h"

#include <dlfcn.h>

#include <atomic>
#include <link.h>
#include <limits.h>
#include <stdlib.h>

#include <mutex>
#include <vector>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit is in the table

namespace peerlink::nccl {
namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

std::string self_path() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&real_nccl), &info) || !info.dli_fname) return {};
  return real_path(info.dli_fname);
}

// The usual install places of libnccl.so.2: distribution packages, the CUDA toolkit, NVIDIA's
// HPC SDK layout. A pip wheel's copy (site-packages/nvidia/nccl/lib) has no fixed path: name it
// with PEERLINK_NCCL_LIBRARY (README, "Use peerlink under an NCCL program").
const char* const kPlaces[] = {
    "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/aarch64-linux-gnu/libnccl.so.2",
    "/usr/lib64/libnccl.so.2",                "/usr/lib/libnccl.so.2",
    "/usr/local/lib/libnccl.so.2",            "/usr/local/nccl/lib/libnccl.so.2",
    "/usr/local/cuda/lib/libnccl.so.2",       "/usr/local/cuda/lib64/libnccl.so.2",
    "/usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2",
};

// Next to what the process already loaded: a library directory holding libnccl.so.2 (an
// application's own copy), and the pip layout site-packages/<pkg>/lib -> site-packages/nvidia/nccl/lib
// (torch's libtorch_cuda.so finds the wheel's NCCL through the same relative RPATH, which an
// LD_PRELOADed shim replaces: this is where the torch wheel's real NCCL is found).
std::vector<std::string> beside_loaded() {
  std::vector<std::string> dirs;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        auto* out = static_cast<std::vector<std::string>*>(arg);
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        size_t slash = name.rfind('/');
        if (slash == std::string::npos) return 0;
        std::string dir = name.substr(0, slash);
        for (const std::string& d : *out)
          if (d == dir) return 0;
        out->push_back(dir);
        return 0;
      },
      &dirs);
  std::vector<std::string> cands;
  for (const std::string& d : dirs) {
    cands.push_back(d + "/libnccl.so.2");
    cands.push_back(d + "/../../nvidia/nccl/lib/libnccl.so.2");
  }
  return cands;
}

struct Loaded {
  RealNccl fns;
  void* handle = nullptr;
  std::string why;
};

Loaded load(const std::string& configured) {
  Loaded l;
  std::string self = self_path();
  std::vector<std::string> cands;
  if (!configured.empty()) cands.push_back(configured);
  for (const std::string& p : beside_loaded()) cands.push_back(p);
  for (const char* p : kPlaces) cands.push_back(p);
  for (const std::string& c : cands) {
    std::string rp = real_path(c);
    if (rp.empty()) {
      if (&c == &cands.front() && !configured.empty()) l.why += "PEERLINK_NCCL_LIBRARY=" + c + " does not exist; ";
      continue;
    }
    if (!self.empty() && rp == self) {
      l.why += c + " is this library; ";
      continue;
    }
    void* h = dlopen(rp.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      const char* e = dlerror();
      l.why += c + ": " + (e ? e : "dlopen failed") + "; ";
      continue;
    }
    if (!dlsym(h, "ncclCommInitRank") || !dlsym(h, "ncclGetVersion")) {
      l.why += c + " lacks ncclCommInitRank; ";
      dlclose(h);
      continue;
    }
    l.handle = h;
    l.fns.path = rp;
#define PL_REAL_FN(name) l.fns.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));
#include "real_fns.inc"
    PL_REAL_FN(ncclDevCommCreate)
    PL_REAL_FN(ncclDevCommDestroy)
#undef PL_REAL_FN
    return l;
  }
  if (l.why.empty()) l.why = "no libnccl.so.2 in the usual places; set PEERLINK_NCCL_LIBRARY";
  return l;
}

}  // namespace

namespace {
std::atomic<const RealNccl*> g_loaded{nullptr};  // set once the real library is open
}  // namespace

const RealNccl* real_nccl(const std::string& configured_path, std::string* why) {
  // One real NCCL per process (its communicators and ours must agree on one library), loaded on
  // first need and never unloaded (its threads may outlive any of our objects).
  static std::once_flag once;
  static Loaded* loaded = nullptr;
  std::call_once(once, [&] {
    loaded = new Loaded(load(configured_path));
    if (loaded->handle) g_loaded.store(&loaded->fns, std::memory_order_release);
  });
  if (!loaded->handle) {
    if (why) *why = loaded->why;
    return nullptr;
  }
  return &loaded->fns;
}

const RealNccl* real_nccl_if_loaded() { return g_loaded.load(std::memory_order_acquire); }

}  // namespace peerlink::nccl

// NCCL through dlopen("libnccl.so.2"): the benchmarks build without NCCL headers or libraries and
// run NCCL side by side with peerlink where the library exists (the GPU machines). Only the few
// types and entry points the allreduce benchmark needs are declared, with NCCL's ABI values.
#pragma once
#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace bench::nccl {

using Result = int;  // ncclResult_t: 0 = ncclSuccess
using Comm = void*;  // ncclComm_t
struct UniqueId {
  char internal[128];
};
// ncclDataType_t
enum DataType : int { Int8 = 0, Uint8 = 1, Int32 = 2, Uint32 = 3, Int64 = 4, Uint64 = 5, Float16 = 6,
                      Float32 = 7, Float64 = 8, Bfloat16 = 9 };
// ncclRedOp_t
enum RedOp : int { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4 };

class Library {
 public:
  // Loads NCCL; available() is false (with why()) when it is missing or incomplete. Which file:
  // PEERLINK_NCCL_LIBRARY when set, else the soname "libnccl.so.2" -- but never peerlink's own
  // NCCL-compatible libnccl.so.2: the benchmarks' RUNPATH is $ORIGIN/../lib, which is BUILD/lib in
  // the build tree, where `make nccl` puts it, and a soname lookup then compares peerlink with
  // itself (2026-11-23: the "NCCL" columns equalled peerlink's NCCL form at every size). A file with
  // libpeerlink.so beside it (or one directory up, as installed) is that library; then the usual
  // install places are tried by absolute path.
  Library() {
    const char* env = std::getenv("PEERLINK_NCCL_LIBRARY");
    if (env && *env) {
      open(env);
    } else if (open("libnccl.so.2") && is_peerlink_shim()) {
      std::string shim = path_;
      dlclose(handle_);
      handle_ = nullptr;
      for (const char* p : {"/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/aarch64-linux-gnu/libnccl.so.2",
                            "/usr/lib64/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/lib/libnccl.so.2"})
        if (::access(p, R_OK) == 0 && open(p)) break;
      if (!handle_) why_ = "libnccl.so.2 is peerlink's own (" + shim + ") and no other NCCL was found: set PEERLINK_NCCL_LIBRARY";
    }
    if (!handle_) return;
    why_.clear();
    if (!sym(get_unique_id, "ncclGetUniqueId") || !sym(comm_init_rank, "ncclCommInitRank") ||
        !sym(all_reduce, "ncclAllReduce") || !sym(comm_destroy, "ncclCommDestroy") ||
        !sym(error_string, "ncclGetErrorString"))
      return;
    sym(get_version, "ncclGetVersion");
    // The other collectives (bench_collectives) and symmetric registration (NCCL >= 2.27): optional,
    // a missing one only makes that benchmark column unavailable.
    opt(all_gather, "ncclAllGather");
    opt(reduce_scatter, "ncclReduceScatter");
    opt(broadcast, "ncclBroadcast");
    opt(reduce, "ncclReduce");
    opt(send, "ncclSend");
    opt(recv, "ncclRecv");
    opt(group_start, "ncclGroupStart");
    opt(group_end, "ncclGroupEnd");
    opt(mem_alloc, "ncclMemAlloc");
    opt(mem_free, "ncclMemFree");
    opt(window_register, "ncclCommWindowRegister");
    opt(window_deregister, "ncclCommWindowDeregister");
    ok_ = true;
  }
  ~Library() {
    // Not dlclose'd: NCCL keeps threads and atexit handlers that must not outlive the code.
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  bool available() const { return ok_; }
  const std::string& path() const { return path_; }  // the file that was loaded
  const std::string& why() const { return why_; }
  int version() const {
    int v = 0;
    if (get_version) get_version(&v);
    return v;
  }
  void check(Result r, const char* what) const {
    if (r != 0) throw std::runtime_error(std::string(what) + " failed: " + error_string(r) + " (" + std::to_string(r) + ")");
  }

  Result (*get_unique_id)(UniqueId*) = nullptr;
  Result (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  Result (*all_reduce)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  Result (*comm_destroy)(Comm) = nullptr;
  const char* (*error_string)(Result) = nullptr;
  Result (*get_version)(int*) = nullptr;
  // Optional entry points (nullptr when this NCCL lacks them).
  Result (*all_gather)(const void*, void*, size_t, int, Comm, void*) = nullptr;
  Result (*reduce_scatter)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  Result (*broadcast)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  Result (*reduce)(const void*, void*, size_t, int, int, int, Comm, void*) = nullptr;
  Result (*send)(const void*, size_t, int, int, Comm, void*) = nullptr;
  Result (*recv)(void*, size_t, int, int, Comm, void*) = nullptr;
  Result (*group_start)() = nullptr;
  Result (*group_end)() = nullptr;
  Result (*mem_alloc)(void**, size_t) = nullptr;
  Result (*mem_free)(void*) = nullptr;
  // ncclCommWindowRegister(comm, buff, size, ncclWindow_t* win, int winFlags); ncclWindow_t is a pointer.
  Result (*window_register)(Comm, void*, size_t, void**, int) = nullptr;
  Result (*window_deregister)(Comm, void*) = nullptr;
  static constexpr int kWinCollSymmetric = 0x01;  // NCCL_WIN_COLL_SYMMETRIC

 private:
  template <typename Fn>
  bool sym(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(dlsym(handle_, name));
    if (!fn && why_.empty()) why_ = std::string("libnccl.so.2 lacks ") + name;
    return fn != nullptr;
  }
  template <typename Fn>
  void opt(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(dlsym(handle_, name));
  }
  bool open(const char* name) {
    handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = dlerror();
      why_ = std::string("dlopen(") + name + ") failed: " + (e ? e : "?");
      return false;
    }
    path_ = name;
    link_map* lm = nullptr;
    if (dlinfo(handle_, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) path_ = lm->l_name;
    return true;
  }
  bool is_peerlink_shim() const {
    char real[PATH_MAX];
    if (!::realpath(path_.c_str(), real)) return false;
    std::string dir(real);
    dir.resize(dir.rfind('/') + 1);
    // The build tree has libpeerlink.so beside libnccl.so.2; an installed tree one directory up
    // (<prefix>/lib/peerlink-nccl/libnccl.so.2).
    for (const char* lib : {"libpeerlink.so", "../libpeerlink.so"})
      if (::access((dir + lib).c_str(), F_OK) == 0) return true;
    return false;
  }
  void* handle_ = nullptr;
  std::string path_;
  bool ok_ = false;
  std::string why_;
};

// NVLink multicast (NVLS) stays off on shared machines; a user's explicit setting wins.
inline void disable_nvls() { setenv("NCCL_NVLS_ENABLE", "0", 0); }

}  // namespace bench::nccl

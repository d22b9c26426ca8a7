// Memory exported by file descriptor (host memfd chunks, CUDA/HIP VMM chunks): the exporter's table
// of live exports and the importer's fetch. An export is a sealed manifest memfd (chunk sizes,
// descriptor numbers and file identities; chunks.h) plus one descriptor per chunk, all held here
// until the export is removed. The MemHandle names the manifest (descriptor number + file identity)
// and the export id; the importer gets the descriptors by pidfd_getfd or from the exporter's
// SCM_RIGHTS socket (common/fd_pass.h) and checks every one against the identities it was promised.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/fd_pass.h"
#include "gpu/backend.h"
#include "gpu/chunks.h"

namespace peerlink::gpu {

// MemHandle::data for HandleKind::HostFd / DeviceVmm. Plain data from a peer: validated on import.
struct FdHandleData {
  uint32_t magic;
  uint32_t nchunks;
  int32_t manifest_fd;  // in the exporter
  uint32_t manifest_bytes;
  uint64_t manifest_dev, manifest_ino;
  uint64_t export_id;
  // Which of the exporter's descriptor servers holds the export: one per FdExports, numbered in
  // the process (two communicators of one process each have their own; see fd_server_name).
  uint32_t server;
  uint32_t reserved;
};
constexpr uint32_t kFdHandleMagic = 0x46444850;  // "PHDF"
static_assert(sizeof(FdHandleData) <= sizeof(MemHandle::data), "fd handle must fit MemHandle::data");
FdHandleData fd_handle_data(const MemHandle& h);  // no validation (see import_fds)

// The abstract socket of descriptor server `server` of process `pid` in the job `job_prefix`. A
// process may hold several communicators of one job (one thread per rank, as NCCL programs run
// them), each with its own backend and export table: one name per process made the second
// server's bind fail (EADDRINUSE), and export ids (each backend counts from 1) were ambiguous.
std::string fd_server_name(const std::string& job_prefix, int32_t pid, uint32_t server);

class FdExports {
 public:
  // `job_prefix` names the socket; the server starts with the first export unless mode is Pidfd.
  FdExports(std::string job_prefix, common::FdPassing mode);
  ~FdExports();
  // The pids allowed to ask the socket for descriptors (the job's other ranks).
  void set_peer_pids(const std::vector<int32_t>& pids);
  // Takes the chunk descriptors; writes and seals the manifest; fills h->data (kind, alloc_id,
  // alloc_bytes, owner_base are the caller's).
  void add(uint64_t export_id, std::vector<common::UniqueFd> chunks, const std::vector<uint64_t>& sizes, MemHandle* h);
  void remove(uint64_t export_id);
  size_t size();
  uint64_t served();

 private:
  struct Export {
    common::UniqueFd manifest;
    std::vector<common::UniqueFd> chunks;
  };
  std::vector<int> lookup(uint64_t key);
  std::string job_prefix_;
  common::FdPassing mode_;
  const uint32_t server_id_;  // unique in the process (fd_server_name)
  std::mutex mu_;
  std::map<uint64_t, Export> exports_;
  std::set<int32_t> peers_;
  std::unique_ptr<common::FdServer> server_;  // last member: its thread stops before the rest go
};

struct ImportedFds {
  std::vector<common::UniqueFd> chunks;
  std::vector<ManifestEntry> entries;
  const char* via = "";  // "pidfd" or "socket"
};
// Fetches and verifies the descriptors of a peer's export. `check_sizes`: every chunk file must
// be at least its manifest size (memfd; VMM descriptors have no file size). Errors: SysError when
// neither mechanism works (both reasons named), Error for a descriptor or manifest that does not
// match the handle.
ImportedFds import_fds(const MemHandle& h, common::FdPassing mode, const std::string& job_prefix, int timeout_ms,
                       bool check_sizes);

}  // namespace peerlink::gpu

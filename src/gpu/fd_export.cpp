#include "gpu/fd_export.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {

using common::UniqueFd;

FdHandleData fd_handle_data(const MemHandle& h) {
  FdHandleData d;
  std::memcpy(&d, h.data, sizeof d);
  return d;
}

std::string fd_server_name(const std::string& job_prefix, int32_t pid, uint32_t server) {
  return common::format("{}s{}", common::fd_socket_name(job_prefix, pid), server);
}

namespace {
uint32_t next_server_id() {
  static std::atomic<uint32_t> n{0};
  return n.fetch_add(1, std::memory_order_relaxed) + 1;  // 0 is never a server (malformed handle)
}
}  // namespace

FdExports::FdExports(std::string job_prefix, common::FdPassing mode)
    : job_prefix_(std::move(job_prefix)), mode_(mode), server_id_(next_server_id()) {}

FdExports::~FdExports() {
  server_.reset();  // stops the thread before the table goes
}

void FdExports::set_peer_pids(const std::vector<int32_t>& pids) {
  std::lock_guard<std::mutex> g(mu_);
  peers_ = std::set<int32_t>(pids.begin(), pids.end());
}

void FdExports::add(uint64_t export_id, std::vector<UniqueFd> chunks, const std::vector<uint64_t>& sizes,
                    MemHandle* h) {
  if (chunks.empty() || chunks.size() != sizes.size() || chunks.size() > kMaxManifestChunks)
    throw InvalidArgument(
        common::format("export {}: {} chunks (at most {})", export_id, chunks.size(), kMaxManifestChunks));
  std::vector<ManifestEntry> e(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    common::FileId id = common::file_id(chunks[i].get());
    e[i] = ManifestEntry{sizes[i], id.dev, id.ino, chunks[i].get(), 0};
  }
  std::vector<unsigned char> bytes = encode_manifest(export_id, e);
  UniqueFd m(memfd_create("peerlink-manifest", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!m)
    throw SysError(common::format("export {}: memfd_create failed: {}", export_id, std::strerror(errno)), errno,
                   "memfd_create");
  if (pwrite(m.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()) ||
      fcntl(m.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw SysError(common::format("export {}: writing its manifest failed: {}", export_id, std::strerror(errno)), errno,
                   "pwrite");
  common::FileId mid = common::file_id(m.get());
  FdHandleData d{kFdHandleMagic, static_cast<uint32_t>(chunks.size()), m.get(), static_cast<uint32_t>(bytes.size()),
                 mid.dev, mid.ino, export_id, server_id_, 0};
  std::lock_guard<std::mutex> g(mu_);
  if (!server_ && mode_ != common::FdPassing::Pidfd)
    server_ = std::make_unique<common::FdServer>(
        fd_server_name(job_prefix_, getpid(), server_id_), [this](uint64_t k) { return lookup(k); },
        [this](int32_t pid) {
          std::lock_guard<std::mutex> g(mu_);
          return peers_.count(pid) != 0;
        });
  exports_[export_id] = Export{std::move(m), std::move(chunks)};  // replaces (closes) an older one
  std::memcpy(h->data, &d, sizeof d);
}

std::vector<int> FdExports::lookup(uint64_t key) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = exports_.find(key);
  if (it == exports_.end()) return {};
  std::vector<int> fds{it->second.manifest.get()};
  for (auto& c : it->second.chunks) fds.push_back(c.get());
  return fds;
}

void FdExports::remove(uint64_t export_id) {
  Export dead;
  std::lock_guard<std::mutex> g(mu_);
  auto it = exports_.find(export_id);
  if (it == exports_.end()) return;
  dead = std::move(it->second);
  exports_.erase(it);
}

size_t FdExports::size() {
  std::lock_guard<std::mutex> g(mu_);
  return exports_.size();
}

uint64_t FdExports::served() { return server_ ? server_->served() : 0; }

namespace {

// All of an export's descriptors, manifest first, by whichever mechanism works.
std::vector<UniqueFd> fetch(const MemHandle& h, const FdHandleData& d,
                            common::FdPassing mode, const std::string& job_prefix, int timeout_ms, const char** via) {
  std::string pidfd_why;
  if (mode != common::FdPassing::Socket) {
    try {
      UniqueFd pfd = common::pidfd_open_process(h.owner_pid);
      std::vector<UniqueFd> out;
      out.push_back(common::pidfd_dup(pfd.get(), d.manifest_fd));
      *via = "pidfd";
      return out;  // chunks follow once the manifest is read (their numbers are in it)
    } catch (const SysError& e) {
      if (mode == common::FdPassing::Pidfd) throw;
      pidfd_why = e.what();
    }
  }
  try {
    auto fds = common::request_fds(fd_server_name(job_prefix, h.owner_pid, d.server), h.owner_pid, d.export_id,
                                   timeout_ms);
    *via = "socket";
    return fds;
  } catch (const SysError& e) {
    if (pidfd_why.empty()) throw;
    throw SysError(
        common::format("cannot get the descriptors of export {} from process {}: pidfd_getfd: {}; socket: {}",
                       d.export_id, h.owner_pid, pidfd_why, e.what()),
        e.error_code(), e.call());
  }
}

}  // namespace

ImportedFds import_fds(const MemHandle& h, common::FdPassing mode, const std::string& job_prefix, int timeout_ms,
                       bool check_sizes) {
  FdHandleData d = fd_handle_data(h);
  if (d.magic != kFdHandleMagic || d.nchunks == 0 || d.nchunks > kMaxManifestChunks || d.manifest_fd < 0 ||
      d.export_id != h.alloc_id || h.owner_pid <= 0 || d.server == 0)
    throw Error(
        common::format("malformed descriptor handle from process {}: magic {}, {} chunks, manifest descriptor {}, "
                       "export {} (allocation {}), server {}",
                       h.owner_pid, d.magic, d.nchunks, d.manifest_fd, d.export_id, h.alloc_id, d.server));
  ImportedFds out;
  std::vector<UniqueFd> fds = fetch(h, d, mode, job_prefix, timeout_ms, &out.via);
  if (!(common::file_id(fds[0].get()) == common::FileId{d.manifest_dev, d.manifest_ino}))
    throw Error(common::format("descriptor {} of process {} is not the manifest of export {} (closed and reused?)",
                               d.manifest_fd, h.owner_pid, d.export_id));
  std::vector<unsigned char> bytes(d.manifest_bytes);
  if (d.manifest_bytes > sizeof(ManifestHeader) + kMaxManifestChunks * sizeof(ManifestEntry) ||
      pread(fds[0].get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
    throw Error(common::format("manifest of export {} from process {} is unreadable", d.export_id, h.owner_pid));
  out.entries = parse_manifest(bytes.data(), bytes.size(), d.export_id, d.nchunks, h.alloc_bytes);
  if (std::strcmp(out.via, "pidfd") == 0) {
    UniqueFd pfd = common::pidfd_open_process(h.owner_pid);
    for (const auto& e : out.entries) fds.push_back(common::pidfd_dup(pfd.get(), e.fd));
  }
  if (fds.size() != size_t(d.nchunks) + 1)
    throw Error(common::format("export {} from process {} came with {} chunk descriptors, expected {}", d.export_id,
                               h.owner_pid, fds.size() - 1, d.nchunks));
  for (uint32_t i = 0; i < d.nchunks; ++i) {
    const ManifestEntry& e = out.entries[i];
    int fd = fds[i + 1].get();
    if (!(common::file_id(fd) == common::FileId{e.dev, e.ino}) || (check_sizes && common::file_size(fd) < e.size))
      throw Error(common::format(
          "chunk {} of export {} from process {} is not the file its manifest names (descriptor {} closed and reused?)",
          i, d.export_id, h.owner_pid, e.fd));
    out.chunks.push_back(std::move(fds[i + 1]));
  }
  return out;
}

}  // namespace peerlink::gpu

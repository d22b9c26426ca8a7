// Host-memory backend: exportable memory is a POSIX SHM segment per allocation, exported by name,
// or (BackendOptions::host_fd) memfd chunks mapped back to back, exported by descriptor like a
// VMM allocation on a GPU. Copied with memcpy. It lets every transport path run across real
// processes without a GPU.
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "common/format.h"
#include "common/log.h"
#include "common/shm_segment.h"
#include "gpu/backend.h"
#include "gpu/chunks.h"
#include "gpu/fd_export.h"
#include "gpu/host_fd_memory.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {
namespace {

class HostCopyQueue final : public CopyQueue {
 public:
  uint64_t copy(void* dst, const void* src, size_t bytes, bool, bool) override {
    std::memcpy(dst, src, bytes);
    return ++issued_;
  }
  bool done(uint64_t) override { return true; }
  void wait_all() override {}

 private:
  uint64_t issued_ = 0;
};

class HostBackend final : public Backend {
 public:
  // `prefix` is "<job prefix>r<rank>_" (transport/setup.cpp): names of this rank's allocations.
  HostBackend(std::string prefix, const BackendOptions& o) : prefix_(std::move(prefix)), opts_(o) {
    size_t r = prefix_.rfind('r', prefix_.size() >= 2 ? prefix_.size() - 2 : 0);
    job_prefix_ = r == std::string::npos ? prefix_ : prefix_.substr(0, r);
    if (opts_.job_prefix.empty()) opts_.job_prefix = job_prefix_;
    fd_exports_ = std::make_unique<FdExports>(opts_.job_prefix, opts_.fd_passing);
  }

  bool is_host() const override { return true; }
  int device() const override { return -1; }

  void* alloc(size_t bytes) override {
    if (bytes == 0) throw InvalidArgument("alloc: bytes must be > 0");
    // Checked before any size arithmetic (header page, mapping length) can wrap.
    if (bytes > common::kMaxSegmentPayload)
      throw InvalidArgument(common::format("alloc: {} bytes exceeds the host backend's limit of {} bytes", bytes,
                                           common::kMaxSegmentPayload));
    if (opts_.host_fd) {
      FdRegion region = FdRegion::create(bytes, opts_.host_chunk_bytes);
      std::lock_guard<std::mutex> g(mu_);
      uint64_t id = ++next_id_;
      char* p = region.base();
      fd_owned_.emplace(p, FdOwned{std::move(region), bytes, id});
      return p;
    }
    std::lock_guard<std::mutex> g(mu_);
    uint64_t id = ++next_id_;
    auto seg = common::Segment::create(common::format("{}m{}", prefix_, id), bytes, id);
    seg.set_unlink_on_destroy(true);
    char* p = static_cast<char*>(seg.payload());
    owned_.emplace(p, Owned{std::move(seg), bytes, id});
    return p;
  }

  void free(void* p) override {
    std::lock_guard<std::mutex> g(mu_);
    auto f = fd_owned_.find(static_cast<char*>(p));
    if (f != fd_owned_.end()) {
      fd_exports_->remove(f->second.id);  // a peer asking later is refused; its mapping stays valid
      fd_owned_.erase(f);                 // unmaps; the memory lives on in peers' mappings only
      return;
    }
    auto it = owned_.find(static_cast<char*>(p));
    if (it == owned_.end())
      throw InvalidArgument(common::format("free: pointer {} was not returned by alloc on this communicator", p));
    owned_.erase(it);  // unmaps and unlinks
  }

  AllocRange find_allocation(const void* p, size_t len) override {
    if (auto r = find_fd_allocation(p, len); r.base) return r;
    std::lock_guard<std::mutex> g(mu_);
    auto c = static_cast<const char*>(p);
    auto it = owned_.upper_bound(const_cast<char*>(c));
    if (it != owned_.begin()) {
      --it;
      char* base = it->first;
      if (c >= base && c < base + it->second.bytes) {
        if (len > static_cast<size_t>(base + it->second.bytes - c))
          throw InvalidArgument(common::format("range [{}, +{}) runs past the end of its allocation ({} bytes at {})",
                                               p, len, it->second.bytes, static_cast<void*>(base)));
        return AllocRange{base, it->second.bytes, it->second.id};
      }
    }
    throw InvalidArgument(
        common::format("host memory {} was not allocated with Communicator::alloc; the host backend can only share "
                       "memory from alloc()",
                       p));
  }

  MemHandle export_allocation(const AllocRange& r) override {
    std::lock_guard<std::mutex> g(mu_);
    if (auto f = fd_owned_.find(r.base); f != fd_owned_.end()) return export_fd_locked(f->second);
    auto it = owned_.find(r.base);
    if (it == owned_.end())
      throw InvalidArgument(common::format("export: {} is not an allocation", static_cast<void*>(r.base)));
    MemHandle h;
    h.kind = HandleKind::HostShm;
    h.alloc_id = r.alloc_id;
    h.alloc_bytes = r.bytes;
    h.owner_base = reinterpret_cast<uint64_t>(r.base);
    const std::string& n = it->second.seg.name();
    std::memcpy(h.data, n.c_str(), std::min(n.size() + 1, sizeof h.data - 1));
    return h;
  }

  void* open(const MemHandle& h) override { return open_from(h, -1); }

  void* open_from(const MemHandle& h, int owner_rank) override {
    if (h.kind == HandleKind::HostFd) return open_fd(h, owner_rank);
    if (h.kind != HandleKind::HostShm) throw Error("host backend cannot open a device IPC handle");
    char buf[sizeof h.data + 1] = {0};
    std::memcpy(buf, h.data, sizeof h.data);  // untrusted: force termination
    const std::string name = buf;
    check_peer_name(name, owner_rank);
    auto seg = common::Segment::open(name);
    if (!seg.valid())
      throw Error(common::format("peer buffer segment {} no longer exists (freed by its owner?)", name));
    // The file must be the allocation the handle describes: that allocation id (alloc() tags each
    // segment with it) and exactly that size; anything else is a wrong or forged handle.
    const common::SegmentHeader& sh = seg.header();
    if (sh.tag != h.alloc_id || seg.payload_bytes() != h.alloc_bytes)
      throw Error(common::format(
          "peer buffer segment {} (allocation id {}, {} bytes) does not match its handle (allocation id {}, {} bytes)",
          name, sh.tag, seg.payload_bytes(), h.alloc_id, h.alloc_bytes));
    std::lock_guard<std::mutex> g(mu_);
    char* p = static_cast<char*>(seg.payload());
    opened_.emplace(p, std::move(seg));
    return p;
  }

  void close(const MemHandle&, void* base) override {
    FdRegion dead;  // unmapped outside the lock
    std::lock_guard<std::mutex> g(mu_);
    opened_.erase(static_cast<char*>(base));
    if (auto f = fd_opened_.find(static_cast<char*>(base)); f != fd_opened_.end()) {
      dead = std::move(f->second);
      fd_opened_.erase(f);
    }
  }
  // pids by rank, 0 for this rank itself.
  void set_peer_pids(const std::vector<int32_t>& pids_by_rank) override {
    std::vector<int32_t> pids;
    for (int32_t p : pids_by_rank)
      if (p > 0) pids.push_back(p);
    fd_exports_->set_peer_pids(pids);
    std::lock_guard<std::mutex> g(mu_);
    peers_ = std::set<int32_t>(pids.begin(), pids.end());
    pid_of_rank_ = pids_by_rank;
  }

  std::unique_ptr<CopyQueue> make_queue(int) override { return std::make_unique<HostCopyQueue>(); }
  void pin(void*, size_t) override {}
  void unpin(void*) override {}
  void copy_sync(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 private:
  struct FdOwned {
    FdRegion region;
    size_t bytes;  // as asked; the region is page-rounded
    uint64_t id;
  };

  // A name read from shared memory is accepted only in the exact form alloc() creates for a peer:
  // "<this job's prefix>r<rank>_m<id>" with a rank other than ours (our own allocations are never
  // a peer's buffer) and the charset/length rules of segment creation. owner_rank >= 0: the rank
  // the handle came from, which must be the rank the name carries (no aiming at a third rank).
  void check_peer_name(const std::string& name, int owner_rank) const {
    auto bad = [&](const char* why) {
      throw Error(
          common::format("peer buffer name '{}' rejected: {} (expected {}r<rank>_m<id>)", name, why, job_prefix_));
    };
    if (!common::valid_segment_name(name)) bad("not a valid segment name");
    if (name.compare(0, job_prefix_.size(), job_prefix_) != 0) bad("not a segment of this job");
    size_t i = job_prefix_.size();
    if (i >= name.size() || name[i] != 'r') bad("no owner rank");
    size_t digits = 0;
    while (i + 1 + digits < name.size() && std::isdigit(static_cast<unsigned char>(name[i + 1 + digits]))) ++digits;
    if (digits == 0 || digits > 4 || (digits > 1 && name[i + 1] == '0')) bad("bad owner rank");
    std::string rank_part = name.substr(i, 1 + digits + 1);  // "r<k>_"
    if (name.compare(i + 1 + digits, 2, "_m") != 0) bad("not an allocation");
    if (job_prefix_ + rank_part == prefix_) bad("names one of this rank's own allocations");
    if (owner_rank >= 0 && rank_part != common::format("r{}_", owner_rank))
      bad(common::format("names another rank's allocation than the sender's (rank {})", owner_rank).c_str());
    size_t id_at = i + 1 + digits + 2;
    if (id_at >= name.size() || name.size() - id_at > 20) bad("bad allocation id");
    for (size_t k = id_at; k < name.size(); ++k)
      if (!std::isdigit(static_cast<unsigned char>(name[k]))) bad("bad allocation id");
  }

  // fd memory: the walk over the allocation's own chunks (chunks.h) is what tells a range that runs
  // into the next allocation (adjacent in address space or not) from one inside it.
  AllocRange find_fd_allocation(const void* p, size_t len) {
    std::lock_guard<std::mutex> g(mu_);
    auto c = static_cast<char*>(const_cast<void*>(p));
    auto it = fd_owned_.upper_bound(c);
    if (it == fd_owned_.begin()) return {};
    --it;
    const FdRegion& reg = it->second.region;
    if (c >= reg.base() + it->second.bytes) return {};
    uint64_t id = it->second.id;
    if (len > static_cast<size_t>(reg.base() + it->second.bytes - c))
      throw InvalidArgument(common::format("range [{}, +{}) runs past the end of its allocation ({} bytes at {})", p,
                                           len, it->second.bytes, static_cast<void*>(reg.base())));
    walk_chunks(reinterpret_cast<uint64_t>(p), len, [&](uint64_t a, Chunk* out) {
      uint64_t at = reinterpret_cast<uint64_t>(reg.base());
      uint64_t end = at + it->second.bytes;  // the caller's bytes, not the page-rounded tail
      for (size_t i = 0; i < reg.sizes().size(); ++i) {
        uint64_t s = std::min<uint64_t>(reg.sizes()[i], end - at);
        if (a >= at && a < at + s) return *out = Chunk{at, s, (id << 16) | i}, true;
        at += reg.sizes()[i];
      }
      return false;
    }, kMaxManifestChunks);
    return AllocRange{reg.base(), it->second.bytes, id};
  }

  MemHandle export_fd_locked(FdOwned& o) {
    std::vector<common::UniqueFd> dups;
    for (const auto& fd : o.region.fds()) {
      dups.emplace_back(fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
      if (!dups.back())
        throw SysError(common::format("export: duplicating a descriptor failed: {}", std::strerror(errno)), errno,
                       "fcntl");
    }
    MemHandle h;
    h.kind = HandleKind::HostFd;
    h.owner_pid = getpid();
    h.alloc_id = o.id;
    h.alloc_bytes = o.region.bytes();
    h.owner_base = reinterpret_cast<uint64_t>(o.region.base());
    fd_exports_->add(o.id, std::move(dups), o.region.sizes(), &h);
    common::log_line(LogLevel::Info, opts_.log_level,
                     common::format("host allocation {} ({} bytes, {} memfd chunk(s)) exported by descriptor ({})",
                                    o.id, o.bytes, o.region.sizes().size(), common::fd_passing_name(opts_.fd_passing)));
    return h;
  }

  // owner_rank >= 0: the rank that sent the handle, whose process must be the exporter (a peer
  // cannot aim this rank at a third rank's memory).
  void* open_fd(const MemHandle& h, int owner_rank) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!peers_.empty() && peers_.count(h.owner_pid) == 0)
        throw Error(common::format("descriptor handle names process {}, which is not a rank of this job", h.owner_pid));
      if (owner_rank >= 0 && owner_rank < static_cast<int>(pid_of_rank_.size()) &&
          pid_of_rank_[owner_rank] != h.owner_pid)
        throw Error(common::format("descriptor handle sent by rank {} names process {}, not that rank's (pid {})",
                                   owner_rank, h.owner_pid, pid_of_rank_[owner_rank]));
    }
    ImportedFds in = import_fds(h, opts_.fd_passing, opts_.job_prefix, opts_.timeout_ms, true);
    std::vector<uint64_t> sizes;
    for (const auto& e : in.entries) sizes.push_back(e.size);
    FdRegion r = FdRegion::map(std::move(in.chunks), sizes);
    common::log_line(LogLevel::Info, opts_.log_level,
                     common::format("opened host allocation {} of process {} ({} bytes, {} chunk(s)) via {}",
                                    h.alloc_id, h.owner_pid, r.bytes(), sizes.size(), in.via));
    std::lock_guard<std::mutex> g(mu_);
    char* p = r.base();
    fd_opened_.emplace(p, std::move(r));
    return p;
  }

  struct Owned {
    common::Segment seg;
    size_t bytes;
    uint64_t id;
  };
  std::string prefix_;
  std::string job_prefix_;
  std::mutex mu_;
  uint64_t next_id_ = 0;
  std::map<char*, Owned> owned_;
  std::map<char*, common::Segment> opened_;
  BackendOptions opts_;
  std::map<char*, FdOwned> fd_owned_;
  std::map<char*, FdRegion> fd_opened_;
  std::set<int32_t> peers_;
  std::vector<int32_t> pid_of_rank_;  // by rank (set_peer_pids), 0 for this rank
  std::unique_ptr<FdExports> fd_exports_;  // after the regions: its server stops first
};

}  // namespace

std::unique_ptr<Backend> make_device_backend(int device, const BackendOptions& opts);  // backend_device.cpp

std::unique_ptr<Backend> make_backend(int device, const std::string& shm_prefix, const BackendOptions& opts) {
  if (device == -1) return std::make_unique<HostBackend>(shm_prefix, opts);
  return make_device_backend(device, opts);
}

}  // namespace peerlink::gpu

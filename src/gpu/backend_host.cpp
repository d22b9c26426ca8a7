// Host-memory backend: exportable memory is a POSIX SHM segment per allocation, exported by name,
// copied with memcpy. It lets every transport path run across real processes without a GPU.
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>

#include "common/log.h"
#include "common/shm_segment.h"
#include "gpu/backend.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {
namespace {

using common::cat;

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
  explicit HostBackend(std::string prefix) : prefix_(std::move(prefix)) {
    size_t r = prefix_.rfind('r', prefix_.size() >= 2 ? prefix_.size() - 2 : 0);
    job_prefix_ = r == std::string::npos ? prefix_ : prefix_.substr(0, r);
  }

  bool is_host() const override { return true; }
  int device() const override { return -1; }

  void* alloc(size_t bytes) override {
    if (bytes == 0) throw InvalidArgument("alloc: bytes must be > 0");
    // Checked before any size arithmetic (header page, mapping length) can wrap.
    if (bytes > common::kMaxSegmentPayload)
      throw InvalidArgument(cat("alloc: ", bytes, " bytes exceeds the host backend's limit of ",
                                common::kMaxSegmentPayload, " bytes"));
    std::lock_guard<std::mutex> g(mu_);
    uint64_t id = ++next_id_;
    auto seg = common::Segment::create(cat(prefix_, "m", id), bytes, id);
    seg.set_unlink_on_destroy(true);
    char* p = static_cast<char*>(seg.payload());
    owned_.emplace(p, Owned{std::move(seg), bytes, id});
    return p;
  }

  void free(void* p) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = owned_.find(static_cast<char*>(p));
    if (it == owned_.end())
      throw InvalidArgument(cat("free: pointer ", p, " was not returned by alloc on this communicator"));
    owned_.erase(it);  // unmaps and unlinks
  }

  AllocRange find_allocation(const void* p, size_t len) override {
    std::lock_guard<std::mutex> g(mu_);
    auto c = static_cast<const char*>(p);
    auto it = owned_.upper_bound(const_cast<char*>(c));
    if (it != owned_.begin()) {
      --it;
      char* base = it->first;
      if (c >= base && c < base + it->second.bytes) {
        if (len > static_cast<size_t>(base + it->second.bytes - c))
          throw InvalidArgument(cat("range [", p, ", +", len, ") runs past the end of its allocation (",
                                    it->second.bytes, " bytes at ", static_cast<void*>(base), ")"));
        return AllocRange{base, it->second.bytes, it->second.id};
      }
    }
    throw InvalidArgument(cat("host memory ", p, " was not allocated with Communicator::alloc; the host "
                              "backend can only share memory from alloc()"));
  }

  MemHandle export_allocation(const AllocRange& r) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = owned_.find(r.base);
    if (it == owned_.end()) throw InvalidArgument(cat("export: ", static_cast<void*>(r.base), " is not an allocation"));
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
    if (h.kind != HandleKind::HostShm) throw Error("host backend cannot open a device IPC handle");
    char buf[sizeof h.data + 1] = {0};
    std::memcpy(buf, h.data, sizeof h.data);  // untrusted: force termination
    const std::string name = buf;
    check_peer_name(name, owner_rank);
    auto seg = common::Segment::open(name);
    if (!seg.valid()) throw Error(cat("peer buffer segment ", name, " no longer exists (freed by its owner?)"));
    // The file must be the allocation the handle describes: that allocation id (alloc() tags each
    // segment with it) and exactly that size; anything else is a wrong or forged handle.
    const common::SegmentHeader& sh = seg.header();
    if (sh.tag != h.alloc_id || seg.payload_bytes() != h.alloc_bytes)
      throw Error(cat("peer buffer segment ", name, " (allocation id ", sh.tag, ", ", seg.payload_bytes(),
                      " bytes) does not match its handle (allocation id ", h.alloc_id, ", ", h.alloc_bytes,
                      " bytes)"));
    std::lock_guard<std::mutex> g(mu_);
    char* p = static_cast<char*>(seg.payload());
    opened_.emplace(p, std::move(seg));
    return p;
  }

  void close(const MemHandle&, void* base) override {
    std::lock_guard<std::mutex> g(mu_);
    opened_.erase(static_cast<char*>(base));
  }

  std::unique_ptr<CopyQueue> make_queue(int) override { return std::make_unique<HostCopyQueue>(); }
  void pin(void*, size_t) override {}
  void unpin(void*) override {}
  void copy_sync(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 private:
  // A name read from shared memory is accepted only in the exact form alloc() creates for a peer:
  // "<this job's prefix>r<rank>_m<id>" with a rank other than ours (our own allocations are never
  // a peer's buffer) and the charset/length rules of segment creation. owner_rank >= 0: the rank
  // the handle came from, which must be the rank the name carries (no aiming at a third rank).
  void check_peer_name(const std::string& name, int owner_rank) const {
    auto bad = [&](const char* why) {
      throw Error(cat("peer buffer name '", name, "' rejected: ", why, " (expected ", job_prefix_, "r<rank>_m<id>)"));
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
    if (owner_rank >= 0 && rank_part != cat("r", owner_rank, "_"))
      bad(cat("names another rank's allocation than the sender's (rank ", owner_rank, ")").c_str());
    size_t id_at = i + 1 + digits + 2;
    if (id_at >= name.size() || name.size() - id_at > 20) bad("bad allocation id");
    for (size_t k = id_at; k < name.size(); ++k)
      if (!std::isdigit(static_cast<unsigned char>(name[k]))) bad("bad allocation id");
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
};

}  // namespace

std::unique_ptr<Backend> make_device_backend(int device);  // backend_device.cpp

std::unique_ptr<Backend> make_backend(int device, const std::string& shm_prefix) {
  if (device == -1) return std::make_unique<HostBackend>(shm_prefix);
  return make_device_backend(device);
}

}  // namespace peerlink::gpu

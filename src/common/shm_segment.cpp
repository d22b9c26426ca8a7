#include "common/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::common {
namespace {

struct LiveOwner { int pid; };
const char* kShmDir = "/dev/shm/";

std::string path_of(const std::string& name) { return kShmDir + name; }

std::string errno_text(int e) { return std::strerror(e); }

uint64_t inode_of_name(const std::string& name) {
  struct stat st;
  if (::stat(path_of(name).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// Maps an open fd holding a segment. The header is read with pread() and validated *before* the
// file is mapped (nothing untrusted is read through a mapping that might already be gone).
void* map_validated(int fd, const std::string& name, size_t* bytes) {
  struct stat st;
  if (fstat(fd, &st) != 0) throw SysError(common::format("fstat({}): {}", name, errno_text(errno)), errno, "fstat");
  unsigned char hdr[sizeof(SegmentHeader)] = {};
  ssize_t got = pread(fd, hdr, sizeof hdr, 0);
  if (got < 0) throw SysError(common::format("pread({}): {}", name, errno_text(errno)), errno, "pread");
  parse_segment_header(hdr, static_cast<size_t>(got), static_cast<uint64_t>(st.st_size), name);
  size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw SysError(common::format("mmap({}, {} bytes): {}", name, size, errno_text(errno)), errno, "mmap");
  *bytes = size;
  return p;
}

// Throws SysError for a failed reservation of `bytes` for `name`, pointing at the usual cause.
[[noreturn]] void throw_no_space(int e, const char* call, const std::string& name, size_t bytes) {
  throw SysError(common::format("cannot reserve {} bytes for SHM segment {} ({}: {}); /dev/shm is a RAM-backed tmpfs: "
                                "check its free space with `df /dev/shm`, remove leftover segments, or allocate less",
                                bytes, name, call, errno_text(e)),
                 e, call);
}

// Creates and fills the temporary file of a new segment: header (magic last), payload zeroed and
// its pages reserved, so that no later access can SIGBUS on a full /dev/shm. Returns the mapping.
void* build_tmp(const std::string& name, const std::string& tmp, size_t payload_bytes, uint64_t tag,
                const std::function<void(void*)>& init, int* fd_out, uint64_t* ino) {
  if (!valid_segment_name(name)) throw InvalidArgument(common::format("invalid SHM segment name '{}'", name));
  if (payload_bytes > kMaxSegmentPayload)
    throw InvalidArgument(common::format("SHM segment {}: payload of {} bytes exceeds the limit of {} bytes", name,
                                         payload_bytes, kMaxSegmentPayload));
  ProcId me = self_proc_id();
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {  // left by a dead process whose pid we now have
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) throw SysError(common::format("cannot create SHM segment {}: {}", tmp, errno_text(errno)), errno, "open");
  size_t bytes = kSegmentHeaderBytes + payload_bytes;
  auto fail = [&](auto&& thrower) {
    ::close(fd);
    ::unlink(tmp.c_str());
    thrower();
  };
  // posix_fallocate both sizes the file and allocates its pages: ENOSPC now, not SIGBUS later.
  // tmpfs gives up with EINTR when a signal arrives during a large reservation: retry those.
  int e;
  do e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  while (e == EINTR);
  if (e != 0) fail([&] { throw_no_space(e, "posix_fallocate", name, bytes); });
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    fail([&] {
      throw SysError(common::format("mmap of new SHM segment {} ({} bytes): {}", name, bytes, errno_text(err)), err,
                     "mmap");
    });
  }
  struct stat st;
  fstat(fd, &st);
  *ino = static_cast<uint64_t>(st.st_ino);
  auto* h = static_cast<SegmentHeader*>(p);
  h->payload_bytes = payload_bytes;
  h->owner_pid = me.pid;
  h->owner_start = me.start_time;
  h->tag = tag;
  try {
    if (init) init(static_cast<char*>(p) + kSegmentHeaderBytes);
  } catch (...) {
    munmap(p, bytes);
    fail([] { throw; });
  }
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kSegmentMagic;
  *fd_out = fd;
  return p;
}

std::string tmp_name_for(const std::string& name) {
  static std::atomic<uint64_t> tmp_counter{0};  // two communicators of one process create at once
  return common::format("{}.tmp.{}.{}", path_of(name), getpid(), tmp_counter.fetch_add(1));
}

}  // namespace

SegmentHeader parse_segment_header(const void* bytes, size_t n, uint64_t file_size, const std::string& name) {
  if (file_size < kSegmentHeaderBytes || n < sizeof(SegmentHeader))
    throw Error(common::format("SHM segment {} is truncated: {} bytes (a header needs {})", name, file_size,
                               kSegmentHeaderBytes));
  SegmentHeader h;
  std::memcpy(&h, bytes, sizeof h);  // a copy: the bytes may be shared and change under us
  // Untrusted: the header's payload size must match what the file really holds.
  if (h.magic != kSegmentMagic || h.payload_bytes != file_size - kSegmentHeaderBytes ||
      h.payload_bytes > kMaxSegmentPayload)
    throw Error(common::format("SHM segment {} has an invalid header (magic {:x}, payload {}, file {} bytes)", name,
                               h.magic, h.payload_bytes, file_size));
  return h;
}

bool valid_segment_name(const std::string& name) {
  if (name.size() < 4 || name.size() > 200 || name.compare(0, 3, "pl_") != 0) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return name.find("..") == std::string::npos;
}

namespace {

bool header_owner_alive(const SegmentHeader& h) {
  ProcId id{h.owner_pid, h.owner_start};
  return process_alive(id);
}

// Replaces the stale segment currently at `name` (inode `old_ino`) with the file at `tmp_path`.
// Serialised by an exclusive flock on the old file, so two replacers never clobber each other.
bool replace_stale(const std::string& name, const std::string& tmp_path) {
  int old_fd = ::open(path_of(name).c_str(), O_RDWR | O_CLOEXEC);
  if (old_fd < 0) return false;  // vanished: caller retries a plain link
  bool replaced = false;
  if (flock(old_fd, LOCK_EX) == 0) {
    struct stat st;
    fstat(old_fd, &st);
    bool still_named = inode_of_name(name) == static_cast<uint64_t>(st.st_ino);
    bool stale = true;
    if (still_named && static_cast<size_t>(st.st_size) >= sizeof(SegmentHeader)) {
      SegmentHeader h{};
      if (pread(old_fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
          h.magic == kSegmentMagic && header_owner_alive(h))
        stale = false;
    }
    if (still_named && stale) replaced = ::rename(tmp_path.c_str(), path_of(name).c_str()) == 0;
    flock(old_fd, LOCK_UN);
    if (still_named && !stale) {
      ::close(old_fd);
      SegmentHeader h{};
      int fd = ::open(path_of(name).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) { (void)!pread(fd, &h, sizeof h, 0); ::close(fd); }
      throw LiveOwner{h.owner_pid};
    }
  }
  ::close(old_fd);
  return replaced;
}

}  // namespace

Segment::~Segment() { reset(); }

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::move(o.name_);
    base_ = o.base_;
    map_bytes_ = o.map_bytes_;
    ino_ = o.ino_;
    fd_ = o.fd_;
    unlink_on_destroy_ = o.unlink_on_destroy_;
    o.base_ = nullptr;
    o.map_bytes_ = 0;
    o.fd_ = -1;
    o.unlink_on_destroy_ = false;
  }
  return *this;
}

void Segment::reset() {
  if (base_) {
    if (unlink_on_destroy_) unlink();
    munmap(base_, map_bytes_);
  }
  if (fd_ >= 0) ::close(fd_);  // drops the rendezvous lock, after the unlink above
  fd_ = -1;
  base_ = nullptr;
  map_bytes_ = 0;
}

void Segment::unlink() {
  if (!name_.empty() && ino_ != 0 && inode_of_name(name_) == ino_) ::unlink(path_of(name_).c_str());
  unlink_on_destroy_ = false;
}

bool Segment::owner_alive() const { return valid() && header_owner_alive(header()); }

Segment Segment::create(const std::string& name, size_t payload_bytes, uint64_t tag,
                        const std::function<void(void*)>& init) {
  Segment s = try_create(name, payload_bytes, tag, init);
  if (!s.valid()) {
    SegmentHeader h{};
    int fd = ::open(path_of(name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) { (void)!pread(fd, &h, sizeof h, 0); ::close(fd); }
    throw Error(common::format("SHM segment {} is in use by live pid {} (the same unique id used by two jobs at once?)",
                               name, h.owner_pid));
  }
  return s;
}

Segment Segment::try_create(const std::string& name, size_t payload_bytes, uint64_t tag,
                            const std::function<void(void*)>& init) {
  std::string tmp = tmp_name_for(name);
  int fd = -1;
  Segment s;
  s.base_ = build_tmp(name, tmp, payload_bytes, tag, init, &fd, &s.ino_);
  ::close(fd);
  s.name_ = name;
  s.map_bytes_ = kSegmentHeaderBytes + payload_bytes;
  try {
    for (int attempt = 0; attempt < 8; ++attempt) {
      if (::link(tmp.c_str(), path_of(name).c_str()) == 0) {
        ::unlink(tmp.c_str());
        return s;
      }
      if (errno != EEXIST)
        throw SysError(common::format("cannot publish SHM segment {}: {}", name, errno_text(errno)), errno, "link");
      try {
        if (replace_stale(name, tmp)) return s;  // rename consumed tmp
      } catch (const LiveOwner&) {
        ::unlink(tmp.c_str());
        return Segment();
      }
    }
    throw Error(common::format("SHM segment {} keeps reappearing; giving up", name));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

Segment Segment::publish_locked(const std::string& name, size_t payload_bytes, uint64_t tag,
                                const std::function<void(void*)>& init) {
  std::string tmp = tmp_name_for(name);
  Segment s;
  s.base_ = build_tmp(name, tmp, payload_bytes, tag, init, &s.fd_, &s.ino_);
  s.name_ = name;
  s.map_bytes_ = kSegmentHeaderBytes + payload_bytes;
  // The lock is on the inode: taken before link(), the name never shows an unowned segment.
  int rc = flock(s.fd_, LOCK_SH);
  int e = errno;
  if (rc == 0 && ::link(tmp.c_str(), path_of(name).c_str()) == 0) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (rc == 0) e = errno;
  ::unlink(tmp.c_str());
  if (e == EEXIST) return Segment();
  throw SysError(common::format("cannot publish SHM segment {}: {}", name, errno_text(e)), e,
                 rc == 0 ? "link" : "flock");
}

Segment Segment::adopt_fd(int fd, const std::string& name) {
  Segment s;
  s.base_ = map_validated(fd, name, &s.map_bytes_);  // throws: the caller still owns fd
  struct stat st;
  fstat(fd, &st);
  s.name_ = name;
  s.ino_ = static_cast<uint64_t>(st.st_ino);
  s.fd_ = fd;
  return s;
}

Segment Segment::open(const std::string& name) {
  if (!valid_segment_name(name)) throw InvalidArgument(common::format("invalid SHM segment name '{}'", name));
  int fd = ::open(path_of(name).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return Segment();
    throw SysError(common::format("cannot open SHM segment {}: {}", name, errno_text(errno)), errno, "open");
  }
  Segment s;
  try {
    s.base_ = map_validated(fd, name, &s.map_bytes_);
  } catch (...) {
    ::close(fd);
    throw;
  }
  struct stat st;
  fstat(fd, &st);
  ::close(fd);
  s.name_ = name;
  s.ino_ = static_cast<uint64_t>(st.st_ino);
  return s;
}

std::vector<std::string> list_segments(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(kShmDir);
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.compare(0, prefix.size(), prefix) == 0) out.push_back(n);
  }
  closedir(d);
  return out;
}

int remove_stale_segments(const std::string& prefix) {
  int removed = 0;
  for (const std::string& n : list_segments(prefix)) {
    int fd = ::open(path_of(n).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    SegmentHeader h{};
    ssize_t got = pread(fd, &h, sizeof h, 0);
    ::close(fd);
    bool tmp_file = n.find(".tmp.") != std::string::npos;
    bool stale;
    if (tmp_file) {  // a creator that died before publishing: the pid is in the name
      int pid = std::atoi(n.substr(n.find(".tmp.") + 5).c_str());
      stale = pid <= 0 || process_start_time(pid) == 0;
    } else {
      stale = got != static_cast<ssize_t>(sizeof h) || h.magic != kSegmentMagic ||
              !header_owner_alive(h);
    }
    if (stale && ::unlink(path_of(n).c_str()) == 0) ++removed;
  }
  return removed;
}

std::string shm_prefix_for(const std::string& unique_id) {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a: distinguishes ids that sanitise alike
  for (unsigned char c : unique_id) hash = (hash ^ c) * 1099511628211ULL;
  std::string clean;
  for (char c : unique_id) {
    if (clean.size() >= 32) break;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    clean.push_back(ok ? c : '-');
  }
  return common::format("pl_{}_{:08x}_", clean, static_cast<unsigned long long>(hash & 0xffffffffULL));
}

}  // namespace peerlink::common

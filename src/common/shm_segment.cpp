#include "common/shm_segment.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

// Maps an open fd whose size is at least a header; validates the header and the size it claims.
void* map_validated(int fd, const std::string& name, size_t* bytes) {
  struct stat st;
  if (fstat(fd, &st) != 0) throw Error(cat("fstat(", name, "): ", errno_text(errno)));
  size_t size = static_cast<size_t>(st.st_size);
  if (size < kSegmentHeaderBytes)
    throw Error(cat("SHM segment ", name, " is truncated: ", size, " bytes"));
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw Error(cat("mmap(", name, ", ", size, "): ", errno_text(errno)));
  auto* h = static_cast<const SegmentHeader*>(p);
  // Untrusted: the header's payload size must match what the file really holds.
  if (h->magic != kSegmentMagic || h->payload_bytes != size - kSegmentHeaderBytes) {
    munmap(p, size);
    throw Error(cat("SHM segment ", name, " has an invalid header (magic ", std::hex, h->magic,
                    std::dec, ", payload ", h->payload_bytes, ", file ", size, " bytes)"));
  }
  *bytes = size;
  return p;
}

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
    unlink_on_destroy_ = o.unlink_on_destroy_;
    o.base_ = nullptr;
    o.map_bytes_ = 0;
    o.unlink_on_destroy_ = false;
  }
  return *this;
}

void Segment::reset() {
  if (base_) {
    if (unlink_on_destroy_) unlink();
    munmap(base_, map_bytes_);
  }
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
    throw Error(cat("SHM segment ", name, " is in use by live pid ", h.owner_pid,
                    " (the same unique id used by two jobs at once?)"));
  }
  return s;
}

Segment Segment::try_create(const std::string& name, size_t payload_bytes, uint64_t tag,
                            const std::function<void(void*)>& init) {
  if (name.empty() || name.size() > 200 || name.find('/') != std::string::npos)
    throw InvalidArgument(cat("invalid SHM segment name '", name, "'"));
  ProcId me = self_proc_id();
  static std::atomic<uint64_t> tmp_counter{0};  // two communicators of one process create at once
  std::string tmp = cat(path_of(name), ".tmp.", me.pid, ".", tmp_counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(cat("cannot create SHM segment ", tmp, ": ", errno_text(errno)));
  size_t bytes = kSegmentHeaderBytes + payload_bytes;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(cat("cannot size SHM segment ", name, " to ", bytes, " bytes: ", errno_text(e)));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  struct stat st;
  fstat(fd, &st);
  ::close(fd);
  if (p == MAP_FAILED) {
    ::unlink(tmp.c_str());
    throw Error(cat("mmap of new SHM segment ", name, " (", bytes, " bytes) failed"));
  }
  auto* h = static_cast<SegmentHeader*>(p);
  h->payload_bytes = payload_bytes;
  h->owner_pid = me.pid;
  h->owner_start = me.start_time;
  h->tag = tag;
  try {
    if (init) init(static_cast<char*>(p) + kSegmentHeaderBytes);
  } catch (...) {
    munmap(p, bytes);
    ::unlink(tmp.c_str());
    throw;
  }
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kSegmentMagic;

  Segment s;
  s.name_ = name;
  s.base_ = p;
  s.map_bytes_ = bytes;
  s.ino_ = static_cast<uint64_t>(st.st_ino);
  try {
    for (int attempt = 0; attempt < 8; ++attempt) {
      if (::link(tmp.c_str(), path_of(name).c_str()) == 0) {
        ::unlink(tmp.c_str());
        return s;
      }
      if (errno != EEXIST) throw Error(cat("cannot publish SHM segment ", name, ": ", errno_text(errno)));
      try {
        if (replace_stale(name, tmp)) return s;  // rename consumed tmp
      } catch (const LiveOwner&) {
        ::unlink(tmp.c_str());
        return Segment();
      }
    }
    throw Error(cat("SHM segment ", name, " keeps reappearing; giving up"));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

Segment Segment::open(const std::string& name) {
  int fd = ::open(path_of(name).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Segment();
    throw Error(cat("cannot open SHM segment ", name, ": ", errno_text(errno)));
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
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(hash & 0xffffffffULL));
  return cat("pl_", clean, "_", hex, "_");
}

}  // namespace peerlink::common

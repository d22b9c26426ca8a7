#include "gpu/host_fd_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::gpu {

using common::UniqueFd;

namespace {

size_t page_round(size_t n) {
  size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + pg - 1) / pg * pg;
}

[[noreturn]] void fail(const std::string& what, const char* call) {
  int e = errno;
  throw SysError(common::format("{}: {} failed: {}", what, call, std::strerror(e)), e, call);
}

// The reservation first (PROT_NONE, no memory), then each chunk MAP_FIXED over its part: the
// chunks are contiguous by construction and nothing else can be mapped in between.
char* reserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fail(common::format("reserving {} bytes of address space", bytes), "mmap");
  return static_cast<char*>(p);
}

void map_chunk(char* at, size_t bytes, int fd) {
  void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) fail(common::format("mapping a {}-byte chunk", bytes), "mmap");
}

}  // namespace

FdRegion::FdRegion(FdRegion&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), fds_(std::move(o.fds_)),
      sizes_(std::move(o.sizes_)) {}

FdRegion& FdRegion::operator=(FdRegion&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    fds_ = std::move(o.fds_);
    sizes_ = std::move(o.sizes_);
  }
  return *this;
}

void FdRegion::reset() noexcept {
  if (base_) munmap(base_, bytes_);  // one call removes the reservation and every chunk in it
  base_ = nullptr;
  bytes_ = 0;
  fds_.clear();
  sizes_.clear();
}

FdRegion FdRegion::create(size_t bytes, size_t chunk_bytes) {
  if (bytes == 0) throw InvalidArgument("alloc: bytes must be > 0");
  size_t total = page_round(bytes);
  size_t chunk = chunk_bytes == 0 ? total : page_round(chunk_bytes);
  FdRegion r;
  r.base_ = reserve(total);
  r.bytes_ = total;
  for (size_t off = 0; off < total; off += chunk) {
    size_t len = std::min(chunk, total - off);
    UniqueFd fd(memfd_create("peerlink-host", MFD_CLOEXEC));
    if (!fd) fail("alloc", "memfd_create");
    if (ftruncate(fd.get(), static_cast<off_t>(len)) != 0)
      fail(common::format("alloc: sizing a {}-byte chunk", len), "ftruncate");
    map_chunk(r.base_ + off, len, fd.get());
    r.fds_.push_back(std::move(fd));
    r.sizes_.push_back(len);
  }
  return r;
}

FdRegion FdRegion::map(std::vector<UniqueFd> fds, const std::vector<uint64_t>& sizes) {
  size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t total = 0;
  for (uint64_t s : sizes) {
    if (s == 0 || s % pg != 0 || s > (size_t(1) << 46) - total)
      throw Error(
          common::format("peer chunk of {} bytes cannot be mapped (not a positive page multiple, or too large)", s));
    total += s;
  }
  FdRegion r;
  r.base_ = reserve(total);
  r.bytes_ = total;
  size_t off = 0;
  for (size_t i = 0; i < fds.size(); ++i) {
    map_chunk(r.base_ + off, sizes[i], fds[i].get());
    off += sizes[i];
  }
  // The mappings keep the memory; the descriptors are not needed any more.
  fds.clear();
  r.sizes_ = sizes;
  return r;
}

}  // namespace peerlink::gpu

// Typed errors thrown by peerlink. Every message names the offending values.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

namespace peerlink {

// Base of every peerlink error.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The caller passed something wrong (bad rank, bounds, stale version, call after close, ...).
// Nothing was written when this is thrown.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(what) {}
};

// A bounded wait (Options::timeout) ran out.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what) {}
};

// A peer process died (detected by pid + start time) or left.
class PeerLostError : public Error {
 public:
  explicit PeerLostError(const std::string& what) : Error(what) {}
};

// The request cannot be served here (e.g. memory that cannot be exported over IPC).
class UnsupportedError : public Error {
 public:
  explicit UnsupportedError(const std::string& what) : Error(what) {}
};

// A GPU runtime call (CUDA or HIP) failed: `code` is the runtime's error code, `call` the function.
class GpuError : public Error {
 public:
  GpuError(const std::string& what, int code, std::string call)
      : Error(what), code_(code), call_(std::move(call)) {}
  int code() const { return code_; }
  const std::string& call() const { return call_; }

 private:
  int code_;
  std::string call_;
};

// An operating-system call failed: `err` is errno, `call` the function (e.g. "ftruncate").
class SysError : public Error {
 public:
  SysError(const std::string& what, int err, std::string call)
      : Error(what), errno_(err), call_(std::move(call)) {}
  int error_code() const { return errno_; }
  const std::string& call() const { return call_; }

 private:
  int errno_;
  std::string call_;
};

}  // namespace peerlink

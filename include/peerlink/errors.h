// Typed errors thrown by peerlink. Every message names the offending values.
#pragma once
#include <stdexcept>
#include <string>

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

}  // namespace peerlink

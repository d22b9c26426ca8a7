// Handle of an asynchronous send or receive.
#pragma once
#include <chrono>
#include <memory>

namespace peerlink {

namespace detail { struct RequestState; }

class Request {
 public:
  Request() = default;  // an empty request is already complete
  explicit Request(std::shared_ptr<detail::RequestState> s) : state_(std::move(s)) {}
  // True when the operation completed; throws the operation's error if it failed.
  bool test();
  // Waits up to the communicator's timeout; throws TimeoutError, PeerLostError or the op's error.
  void wait();
  void wait(std::chrono::milliseconds timeout);
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::RequestState> state_;
};

}  // namespace peerlink

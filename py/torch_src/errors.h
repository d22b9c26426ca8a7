// peerlink's errors become torch's at every entry point of the extension, so Python code catches
// what it catches from the other backends: InvalidArgument -> ValueError, UnsupportedError ->
// NotImplementedError, TimeoutError / PeerLostError / any other peerlink::Error ->
// torch.distributed.DistBackendError (a RuntimeError). Messages keep peerlink's text (which names
// the offending values) behind "peerlink <call>: ".
#pragma once
#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "peerlink/errors.h"

namespace peerlink::pt {

[[noreturn]] void rethrow_translated(const char* what, std::exception_ptr e);

template <typename Fn>
auto translate_errors(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error&) {
    throw;
  } catch (const peerlink::Error&) {
    rethrow_translated(what, std::current_exception());
  }
}

}  // namespace peerlink::pt

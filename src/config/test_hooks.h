// Switches of the library's own tests: fault injection and coverage of code paths that the
// measured defaults would otherwise never take. Not part of the API: Options carries them behind an
// opaque pointer (Options::test_hooks), from_env fills them from their variables (the registry in
// src/config/knobs.cpp, audience Test: not listed in docs/configuration.md), and code that honours
// one reads it with test_hooks(options).
#pragma once
#include <memory>

#include "peerlink/options.h"

namespace peerlink::detail {

struct TestHooks {
  // The higher rank of every pair never opens the done_seq channel (PEERLINK_TEST_CHANNEL_NEVER_READY),
  // exercising the ring fallback.
  bool channel_never_ready = false;
  // register_window on this rank fails to map its peers' ranges (PEERLINK_TEST_WINDOW_MAP_FAIL),
  // exercising the agreement that the window then has no zero-copy path on any rank.
  bool window_map_fail = false;
  // The generic one-shot allreduce loop even where a specialised one exists
  // (PEERLINK_ALLREDUCE_ONESHOT_GENERIC): tests keep the generic loop covered.
  bool allreduce_oneshot_generic = false;

  bool any() const { return channel_never_ready || window_map_fail || allreduce_oneshot_generic; }
};

// The hooks of `o` (all off when none were set).
inline const TestHooks& test_hooks(const Options& o) {
  static const TestHooks kNone;
  return o.test_hooks ? *o.test_hooks : kNone;
}

// For tests: gives `o` the hooks `h` (shared, immutable: copies of `o` carry the same hooks).
inline void set_test_hooks(Options& o, const TestHooks& h) { o.test_hooks = std::make_shared<const TestHooks>(h); }

// For tests: turns one switch of `o` on (or off), keeping the others:
//   set_test_hook(o, &TestHooks::channel_never_ready);
inline void set_test_hook(Options& o, bool TestHooks::*hook, bool on = true) {
  TestHooks h = test_hooks(o);
  h.*hook = on;
  set_test_hooks(o, h);
}

}  // namespace peerlink::detail

// Options::from_env: every PEERLINK_* variable, read when a communicator is created.
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"
#include "topology/system.h"

namespace peerlink {
namespace {

using common::cat;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

long long parse_int(const char* name, const char* v, long long lo, long long hi) {
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (!end || *end != '\0' || x < lo || x > hi)
    throw InvalidArgument(cat(name, "='", v, "' is not an integer in [", lo, ", ", hi, "]"));
  return x;
}

bool parse_bool(const char* name, const char* v) {
  std::string s = lower(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw InvalidArgument(cat(name, "='", v, "' is not a boolean (use 1 or 0)"));
}

}  // namespace

const char* to_string(Completion c) {
  switch (c) {
    case Completion::Auto: return "auto";
    case Completion::DoneSeq: return "done_seq";
    case Completion::Ring: return "ring";
  }
  return "?";
}

const char* to_string(Path p) {
  switch (p) {
    case Path::Auto: return "auto";
    case Path::Direct: return "direct";
    case Path::Relay: return "relay";
  }
  return "?";
}

Options Options::from_env() {
  Options o;
  if (const char* v = env("PEERLINK_TIMEOUT_MS"))
    o.timeout = std::chrono::milliseconds(parse_int("PEERLINK_TIMEOUT_MS", v, 1, 86400000LL));
  if (const char* v = env("PEERLINK_COMPLETION")) {
    std::string s = lower(v);
    if (s == "auto") o.completion = Completion::Auto;
    else if (s == "done_seq" || s == "doneseq") o.completion = Completion::DoneSeq;
    else if (s == "ring") o.completion = Completion::Ring;
    else throw InvalidArgument(cat("PEERLINK_COMPLETION='", v, "' is not one of auto, done_seq, ring"));
  }
  if (const char* v = env("PEERLINK_TRANSPORT")) {
    std::string s = lower(v);
    if (s == "auto") o.path = Path::Auto;
    else if (s == "direct" || s == "p2p") o.path = Path::Direct;
    else if (s == "relay") o.path = Path::Relay;
    else throw InvalidArgument(cat("PEERLINK_TRANSPORT='", v, "' is not one of auto, direct, relay"));
  }
  if (const char* v = env("PEERLINK_P2P_DISABLE")) o.p2p_disable = parse_bool("PEERLINK_P2P_DISABLE", v);
  if (const char* v = env("PEERLINK_P2P_LEVEL")) {
    topology::PathType level;
    if (!topology::parse_level(v, &level))
      throw InvalidArgument(cat("PEERLINK_P2P_LEVEL='", v, "' is not one of LOC, NVL, PIX, PXB, PHB, SYS or 0-4"));
    o.p2p_level = v;
  }
  if (const char* v = env("PEERLINK_TOPO_FILE")) o.topo_file = v;
  if (const char* v = env("PEERLINK_ALLREDUCE_ALGO")) o.allreduce_algo = lower(v);
  if (const char* v = env("PEERLINK_DEBUG")) {
    std::string s = lower(v);
    if (s == "warn") o.log_level = LogLevel::Warn;
    else if (s == "info") o.log_level = LogLevel::Info;
    else if (s == "trace") o.log_level = LogLevel::Trace;
    else if (s == "none" || s == "off") o.log_level = LogLevel::None;
    else throw InvalidArgument(cat("PEERLINK_DEBUG='", v, "' is not one of WARN, INFO, TRACE, NONE"));
  }
  if (const char* v = env("PEERLINK_CHANNEL_READY_MS"))
    o.channel_ready_timeout = std::chrono::milliseconds(parse_int("PEERLINK_CHANNEL_READY_MS", v, 1, 3600000LL));
  if (const char* v = env("PEERLINK_RELAY_CHUNK_BYTES"))
    o.relay_chunk_bytes = static_cast<size_t>(parse_int("PEERLINK_RELAY_CHUNK_BYTES", v, 4096, 1LL << 30));
  if (const char* v = env("PEERLINK_RELAY_SLOTS"))
    o.relay_slots = static_cast<int>(parse_int("PEERLINK_RELAY_SLOTS", v, 2, 64));
  if (const char* v = env("PEERLINK_STRIPE_STREAMS"))
    o.stripe_streams = static_cast<int>(parse_int("PEERLINK_STRIPE_STREAMS", v, 1, 16));
  if (const char* v = env("PEERLINK_STRIPE_THRESHOLD"))
    o.stripe_threshold = static_cast<size_t>(parse_int("PEERLINK_STRIPE_THRESHOLD", v, 4096, 1LL << 40));
  if (const char* v = env("PEERLINK_KERNEL_COPY_MAX"))
    o.kernel_copy_max = static_cast<size_t>(parse_int("PEERLINK_KERNEL_COPY_MAX", v, 0, 1LL << 30));
  if (const char* v = env("PEERLINK_TEST_CHANNEL_NEVER_READY"))
    o.test_channel_never_ready = parse_bool("PEERLINK_TEST_CHANNEL_NEVER_READY", v);
  return o;
}

}  // namespace peerlink

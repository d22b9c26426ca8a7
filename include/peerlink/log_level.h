// Log verbosity. Its own header because it belongs to the lowest layer (common/: the logger) while
// Options (config/) selects it: options.h includes this, never the other way round.
#pragma once

namespace peerlink {

enum class LogLevel { None, Warn, Info, Trace };

}  // namespace peerlink

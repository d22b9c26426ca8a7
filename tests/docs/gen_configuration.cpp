// Prints docs/configuration.md as the knob registry says it (src/config/knobs.cpp). `make docs`
// writes the file with it; `make test-docs` fails when the committed file differs.
#include <cstdio>
#include <string>

#include "config/knobs.h"

int main() {
  const std::string md = peerlink::config::render_configuration_markdown();
  return std::fwrite(md.data(), 1, md.size(), stdout) == md.size() ? 0 : 1;
}

# The peerlink-topo CLI, end to end on the topology fixtures (the gtests cover the library).
EXTRA_TESTS += test-topo-cli
.PHONY: test-topo-cli
test-topo-cli: $(BUILD)/bin/peerlink-topo
	bash tests/topology/cli_test.sh $(BUILD)/bin

# Tools are built without dependency files: rebuild peerlink-topo when its public headers change.
$(BUILD)/bin/peerlink-topo: $(wildcard include/peerlink/topology.h include/peerlink/options.h)

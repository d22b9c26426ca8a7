# docs/configuration.md is generated from the knob registry (src/config/knobs.cpp).
#   make docs         regenerate it (commit the result)
#   make test-docs    fails when the committed file differs from what the registry says
# The generator links the internal archive of whatever backend this make builds; it only formats.
CONFIG_DOC_GEN := $(BUILD)/bin/gen_configuration
EXTRA_TESTS += test-docs
.PHONY: docs test-docs

$(CONFIG_DOC_GEN): tests/docs/gen_configuration.cpp $(LIB_INTERNAL)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -o $@ $< $(LIB_INTERNAL) $(LDFLAGS_ALL) $(BACKEND_LDLIBS) -ldl -lrt

docs: $(CONFIG_DOC_GEN)
	@mkdir -p docs
	$(CONFIG_DOC_GEN) > docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md
	@echo "docs: wrote docs/configuration.md"

test-docs: $(CONFIG_DOC_GEN)
	@$(CONFIG_DOC_GEN) > $(BUILD)/configuration.md
	@if ! diff -u docs/configuration.md $(BUILD)/configuration.md; then \
	  echo "test-docs: docs/configuration.md is stale (the diff above is what the knob registry says); run make docs"; \
	  exit 1; \
	fi
	@echo "test-docs: docs/configuration.md matches the knob registry"

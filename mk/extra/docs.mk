# docs/configuration.md is generated from the knob registry (src/config/knobs.cpp).
#   make docs         regenerate it (commit the result)
#   make test-docs    fails when the committed file differs from what the registry says
# The generator links only the registry's objects (src/config/ and the formatting it uses), so
# neither the rest of the library nor a GPU toolkit is compiled for it.
CONFIG_DOC_GEN := $(BUILD)/bin/gen_configuration
CONFIG_DOC_OBJS := $(filter $(BUILD)/obj/src/config/%.o $(BUILD)/obj/src/common/format.o,$(LIB_OBJS))
EXTRA_TESTS += test-docs
.PHONY: docs test-docs

$(CONFIG_DOC_GEN): tests/docs/gen_configuration.cpp $(CONFIG_DOC_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -o $@ $< $(CONFIG_DOC_OBJS) $(LDFLAGS_ALL)

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

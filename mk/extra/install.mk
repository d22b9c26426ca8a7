# Install for C++ programs that link peerlink:
#   make install PREFIX=/usr/local [DESTDIR=/staging]
# puts the public headers in <prefix>/include/peerlink/, libpeerlink.so.$(VERSION) with its SONAME
# link libpeerlink.so.$(SOVERSION) and the development link libpeerlink.so in <prefix>/lib/,
# peerlink-topo and the benchmarks in <prefix>/bin/ (RUNPATH $ORIGIN/../lib), lib/pkgconfig/peerlink.pc,
# the CMake package lib/cmake/peerlink/ (find_package(peerlink) -> peerlink::peerlink), and
# libnccl.so.2 (when built: `make nccl`) in <prefix>/lib/peerlink-nccl/, a directory of its own so
# that it never shadows the system's NCCL (LD_LIBRARY_PATH or LD_PRELOAD selects it; its RUNPATH
# $ORIGIN/.. finds libpeerlink.so). PREFIX is written into peerlink.pc; DESTDIR only stages.
#   make test-install    installs into a temporary prefix, builds examples/cpp/ against it with
#                        pkg-config and with CMake, runs both on the host backend, checks the SONAME
PREFIX ?= /usr/local
DESTDIR ?=
INSTALL_ROOT = $(DESTDIR)$(abspath $(PREFIX))
INSTALL_SUBST = sed -e 's|@PREFIX@|$(abspath $(PREFIX))|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@SOVERSION@|$(SOVERSION)|g'
EXTRA_TESTS += test-install
.PHONY: install test-install

install: $(LIB) $(TOOL_BINS) $(BENCH_BINS) nccl
	install -d $(INSTALL_ROOT)/include/peerlink $(INSTALL_ROOT)/lib/pkgconfig $(INSTALL_ROOT)/lib/cmake/peerlink \
	  $(INSTALL_ROOT)/bin
	install -m 0644 include/peerlink/*.h $(INSTALL_ROOT)/include/peerlink/
	install -m 0755 $(LIB_REAL) $(INSTALL_ROOT)/lib/
	ln -sfn $(notdir $(LIB_REAL)) $(INSTALL_ROOT)/lib/$(LIB_SONAME)
	ln -sfn $(LIB_SONAME) $(INSTALL_ROOT)/lib/libpeerlink.so
	install -m 0755 $(TOOL_BINS) $(BENCH_BINS) $(INSTALL_ROOT)/bin/
	@if [ -f $(BUILD)/lib/libnccl.so.2 ]; then \
	  echo "install -m 0755 $(BUILD)/lib/libnccl.so.2 $(INSTALL_ROOT)/lib/peerlink-nccl/"; \
	  install -d $(INSTALL_ROOT)/lib/peerlink-nccl && \
	  install -m 0755 $(BUILD)/lib/libnccl.so.2 $(INSTALL_ROOT)/lib/peerlink-nccl/ && \
	  ln -sfn libnccl.so.2 $(INSTALL_ROOT)/lib/peerlink-nccl/libnccl.so; \
	else echo "install: no libnccl.so.2 in $(BUILD)/lib (no nccl.h found): not installed"; fi
	$(INSTALL_SUBST) mk/install/peerlink.pc.in > $(INSTALL_ROOT)/lib/pkgconfig/peerlink.pc
	$(INSTALL_SUBST) mk/install/peerlinkConfig.cmake.in > $(INSTALL_ROOT)/lib/cmake/peerlink/peerlinkConfig.cmake
	$(INSTALL_SUBST) mk/install/peerlinkConfigVersion.cmake.in > $(INSTALL_ROOT)/lib/cmake/peerlink/peerlinkConfigVersion.cmake
	@echo "install: peerlink $(VERSION) in $(INSTALL_ROOT)"

test-install: install-check-prereqs
	bash tests/install/check_install.sh "$(MAKE)" "$(BACKEND)" "$(BUILD)" "$(VERSION)"

.PHONY: install-check-prereqs
install-check-prereqs: $(LIB) $(TOOL_BINS) $(BENCH_BINS) nccl

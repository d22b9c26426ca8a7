# Python package in CI: build the library + pybind11 extension, pip-install it into the current
# python, run py/tests (real processes on the host backend; GPU kinds skip without a GPU).
# setup.py builds the library with `make lib` in PY_BUILD: $(BUILD) by default, the library this
# make builds and tests with the same backend, so `make test` compiles it once (a build-py/ of its
# own compiled the whole library again, nvcc's kernels included). PY_BUILD=build-py/... keeps the
# package's library apart.
# PIP_BREAK_SYSTEM_PACKAGES: Debian's system python refuses pip installs (PEP 668) otherwise;
# CI machines are disposable, and install_deps.sh installs pytest/numpy/pybind11 the same way.
PYTHON ?= python3
PY_BUILD ?= $(BUILD)
EXTRA_TESTS += test-py
.PHONY: test-py py-install

py-install:
	@$(PYTHON) -c "import wheel, setuptools" 2>/dev/null || PIP_BREAK_SYSTEM_PACKAGES=1 $(PYTHON) -m pip install -q wheel setuptools
	PIP_BREAK_SYSTEM_PACKAGES=1 PEERLINK_BACKEND=$(BACKEND) PEERLINK_BUILD_DIR=$(abspath $(PY_BUILD)) \
	  $(PYTHON) -m pip install -q --no-build-isolation ./py

# Run from the repository root so that `import peerlink` is the installed package, not py/peerlink.
test-py: py-install
	$(PYTHON) -m pytest py/tests -q -p no:cacheprovider
	@bash scripts/check_shm_clean.sh

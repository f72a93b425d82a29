# kdet — one non-recursive Makefile for the whole tree.
#
# Every folder that builds something has a rules.mk, included below, which
# calls the kd_lib / kd_prog / kd_test macros. Objects go under $(O) so the
# same sources build in several configurations side by side:
#   make                  -> build/        (-O2, -Werror)
#   make O=build-asan SANITIZE=1 -> ASan + UBSan
# `make check` runs the tests in both and prints one total line.

O        ?= build
ASAN_O   ?= build-asan
SANITIZE ?=
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
# Tests run at once: twice the cores, as most of a test's time is spent waiting on
# the servers it starts (pods starting, timeouts, polls), not computing.
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))
ONLY     ?=

PKG_CONFIG ?= pkg-config
PKGS := jansson yaml-0.1 libcurl libmicrohttpd libarchive libpq openssl cmocka
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)

WARN     := -Wall -Wextra -Werror -Wno-format-zero-length -Wshadow -Wvla \
            -Wmissing-prototypes -Wstrict-prototypes
CFLAGS   ?= -g -O2
KD_CFLAGS = -std=gnu11 $(WARN) -D_GNU_SOURCE -fPIC -iquote lib -Idtrain/include \
            -MMD -MP $(PKG_CFLAGS)
KD_LDFLAGS = -pthread
ifeq ($(SANITIZE),1)
  CFLAGS   = -g -O1
  KD_CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer \
                -fno-sanitize-recover=undefined -DKD_SANITIZE=1
  KD_LDFLAGS += -fsanitize=address,undefined
endif

# ---- macros ---------------------------------------------------------------
kd_objs = $(patsubst %.c,$(O)/obj/%.o,$(1))
kd_libs = $(foreach l,$(1),$(O)/lib/libkd_$(l).a)
# System libraries that kdet's own libraries in $(1) need (zlib: lib/k8s's cache, lib/http's gzip).
kd_syslibs = $(if $(filter k8s http,$(1)),-lz)

# $(call kd_lib,NAME,SRCS): static library $(O)/lib/libkd_NAME.a
define kd_lib
$(O)/lib/libkd_$(1).a: $(call kd_objs,$(2))
	@mkdir -p $$(@D)
	@rm -f $$@
	@$$(if $$(Q),echo "  AR      $$@")
	$$(Q)$$(AR) rcs $$@ $$^
ALL_LIBS += $(O)/lib/libkd_$(1).a
endef

# $(call kd_prog,NAME,SRCS,KD_LIBS,LDLIBS): program $(O)/bin/NAME.
# KD_LIBS in link order (dependents first, core last).
define kd_prog
$(O)/bin/$(1): $(call kd_objs,$(2)) $(call kd_libs,$(3))
	@mkdir -p $$(@D)
	@$$(if $$(Q),echo "  LD      $$@")
	$$(Q)$$(CC) $$(KD_LDFLAGS) -o $$@ $(call kd_objs,$(2)) $(call kd_libs,$(3)) $(4) $(call kd_syslibs,$(3))
ALL_PROGS += $(O)/bin/$(1)
endef

# $(call kd_test,NAME,SRCS,KD_LIBS,LDLIBS,TIMEOUT_S,TAGS,EXTRA_DEPS):
# test binary $(O)/tests/NAME, run by tests/run under a timeout.
# TAGS: slow (skipped by `make check-quick`), gpu (needs KD_TEST_GPU=1),
# noasan (not run in the sanitizer build).
define kd_test
$(O)/tests/$(1): $(call kd_objs,$(2)) $(call kd_libs,$(3))
	@mkdir -p $$(@D)
	@$$(if $$(Q),echo "  LD      $$@")
	$$(Q)$$(CC) $$(KD_LDFLAGS) -o $$@ $(call kd_objs,$(2)) $(call kd_libs,$(3)) $(4) $(call kd_syslibs,$(3)) -lcmocka
ALL_TESTS += $(1)
TEST_META += $(1):$(or $(5),120):$(subst $(eval) ,+,$(strip $(6)))
TEST_DEPS_$(1) := $(O)/tests/$(1) $(7)
endef

# $(call kd_test_script,NAME,SCRIPT,TIMEOUT_S,TAGS,DEPS): a shell test.
# The script prints `N passed, N failed` (or exits non-zero on failure);
# it gets KD_BUILD (the build dir) and KD_SRC (the tree) in its env.
define kd_test_script
$(O)/tests/$(1): $(2)
	@mkdir -p $$(@D)
	@printf '#!/bin/sh\nexec "%s" "$$$$@"\n' "$$(abspath $(2))" > $$@
	@chmod +x $$@
ALL_TESTS += $(1)
TEST_META += $(1):$(or $(3),120):$(subst $(eval) ,+,$(strip $(4)))
TEST_DEPS_$(1) := $(O)/tests/$(1) $(5)
endef

# $(call kd_fuzz,NAME,SRCS,LDLIBS,CORPUS,CFLAGS,DICT): a libFuzzer target build-fuzz/NAME,
# built with clang from the sources (not from $(O)); SRCS include the code under test.
# CORPUS: the folders of inputs kept in the tree (seeds, known attacks, past findings);
# CFLAGS: extra flags for the harness; DICT: a libFuzzer dictionary. Each target also
# gets a replay test, test_fuzz_<NAME without fuzz_>: the same harness built in $(O)
# with tests/fuzz/replay.c as main, run over every CORPUS file by `make check`.
FUZZ_O := build-fuzz
FUZZ_CFLAGS = -std=gnu11 -g -O1 -D_GNU_SOURCE -iquote lib -Idtrain/include $(PKG_CFLAGS) \
              -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer
define kd_fuzz
$(FUZZ_O)/$(1): $(2)
	@mkdir -p $$(@D)
	@$$(if $$(Q),echo "  FUZZ    $$@")
	$$(Q)clang $$(FUZZ_CFLAGS) $(5) -o $$@ $(2) $(3)
ALL_FUZZ += $(1)
FUZZ_CORPUS_$(1) := $(4)
FUZZ_DICT_$(1) := $(6)
$(call kd_objs,$(filter tests/%,$(2))): KD_CFLAGS += $(5)
$(O)/obj/tests/fuzz/replay-$(1).o: tests/fuzz/replay.c
	@mkdir -p $$(@D)
	@$$(if $$(Q),echo "  CC      $$@")
	$$(Q)$$(CC) $$(KD_CFLAGS) $$(CFLAGS) -DKD_FUZZ_CORPUS='"$(strip $(4))"' -c -o $$@ $$<
$(eval $(call kd_test,test_fuzz_$(patsubst fuzz_%,%,$(1)),$(2) tests/fuzz/replay-$(1).c,,$(3),120,fuzz))
endef

# $(call kd_bench,NAME,SCRIPT,DEPS): `make bench` runs SCRIPT (with KD_BUILD
# and KD_SRC set); it prints our figure, the anchor's and their ratio.
# `make bench BENCH=NAME` runs one.
define kd_bench
ALL_BENCH += $(1)
BENCH_SCRIPT_$(1) := $(2)
BENCH_DEPS_$(1) := $(3)
endef

DEB_PACKAGES :=
DEPS_EXTRA :=
# What the controller's end-to-end scenarios run (a private kdet-local, the controller, the
# launcher in pods, det); set before the modules' rules, which name it in their tests' deps.
CTRL_E2E_DEPS := $(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch $(O)/bin/det

# ---- modules --------------------------------------------------------------
.DEFAULT_GOAL := all
RULES := $(sort $(wildcard lib/*/rules.mk controller/rules.mk controller/*/rules.mk \
           launcher/rules.mk dtrain/rules.mk cli/rules.mk local/rules.mk helm/rules.mk images/rules.mk ui/rules.mk \
           examples/*/rules.mk bench/*/rules.mk fuzz/rules.mk \
           tests/rules.mk tests/*/rules.mk tests/*/*/rules.mk tests/*/*/*/rules.mk))
include mk/deps.mk
include $(RULES)

ifeq ($(V),1)
  Q :=
else
  Q := @
endif

# Debian's ccache, when installed, keeps compiled objects outside the tree
# (keyed by the source, the flags and the compiler), shared by every clone and
# by build/ and build-asan/: a fresh clone compiles only what changed. CCACHE=0
# turns it off; KD_CACHE_ROOT moves it (with the other caches, e2e/kube).
KD_CACHE_ROOT ?= $(or $(KDET_KUBE_CACHE),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME)/kdet),$(HOME)/.cache/kdet)
CCACHE ?= $(shell command -v ccache 2>/dev/null)
ifneq ($(filter-out 0,$(CCACHE)),)
  KD_CC_LAUNCH := CCACHE_DIR=$(KD_CACHE_ROOT)/ccache CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1 \
                  CCACHE_MAXSIZE=2G $(CCACHE)
endif

$(O)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(KD_CC_LAUNCH) $(CC) $(KD_CFLAGS) $(CFLAGS) -c -o $@ $<

-include $(shell find $(O)/obj -name '*.d' 2>/dev/null)

# ---- top-level targets ----------------------------------------------------
.PHONY: all check check-quick check-build check-run deps lint format clean bench demo e2e e2e-real fuzz help soak

all: $(ALL_PROGS) $(ALL_LIBS)

SELECTED_TESTS := $(if $(ONLY),$(filter $(ONLY),$(ALL_TESTS)),$(ALL_TESTS))

# Build and run the selected tests in $(O); results go to $(O)/tests/results.
# With ONLY set, only the selected tests and their declared deps are built,
# so one module's tests run while another module is mid-edit.
check-build: $(foreach t,$(SELECTED_TESTS),$(TEST_DEPS_$(t))) $(if $(ONLY),,$(ALL_PROGS) $(ALL_LIBS))

check-run: check-build
	@mkdir -p $(O)/tests
	@printf '%s\n' $(filter $(addsuffix :%,$(SELECTED_TESTS)),$(TEST_META)) > $(O)/tests/list
	@tests/run $(O) $(O)/tests/list $(TEST_JOBS)

# All tests, then the same tests but `slow` ones under ASan+UBSan, then one
# total line. The sanitizer build is made while the first pass runs (one job,
# niced: the end-to-end tests mostly wait), its output in $(ASAN_O)/build.log.
# The soak test runs 2 minutes in make check (about a dozen faults), 5 in make e2e.
check: export KD_SOAK_DURATION ?= 2m
check:
	@rm -f $(O)/tests/results $(ASAN_O)/tests/results; mkdir -p $(ASAN_O); \
	 nice -n 10 $(MAKE) --no-print-directory -j1 check-build O=$(ASAN_O) SANITIZE=1 ONLY='$(ONLY)' \
	   > $(ASAN_O)/build.log 2>&1 & asan_build=$$!; \
	 $(MAKE) --no-print-directory -j$(JOBS) check-run O=$(O) ONLY='$(ONLY)'; \
	 if ! wait $$asan_build; then \
	   echo "the sanitizer build failed ($(ASAN_O)/build.log):"; tail -n 40 $(ASAN_O)/build.log; fi; \
	 KD_TEST_SKIP_TAGS="slow $$KD_TEST_SKIP_TAGS" $(MAKE) --no-print-directory -j$(JOBS) check-run O=$(ASAN_O) SANITIZE=1 ONLY='$(ONLY)'; \
	 tests/total $(O)/tests/results $(ASAN_O)/tests/results

check-quick:
	@rm -f $(O)/tests/results; KD_TEST_SKIP_TAGS=slow $(MAKE) --no-print-directory -j$(JOBS) check-run O=$(O) ONLY='$(ONLY)'; \
	 tests/total $(O)/tests/results

deps:
	@mk/deps.sh $(sort $(DEB_PACKAGES))
	@for t in $(DEPS_EXTRA); do $(MAKE) --no-print-directory $$t || exit 1; done

lint:
	@mk/lint.sh

# `make fuzz` builds the targets; with FUZZ_TIME (60s, 10m, 1h) it also runs each one
# for that long in wall time, with FUZZ_CPU for that much of its own CPU time (mk/fuzz.sh);
# FUZZ='fuzz_http%' picks some, FUZZ_JOBS=N runs N at once.
FUZZ_TIME ?=
FUZZ_CPU ?=
FUZZ_JOBS ?= 1
FUZZ ?=
SELECTED_FUZZ := $(if $(FUZZ),$(foreach f,$(FUZZ),$(filter $(f),$(ALL_FUZZ))),$(ALL_FUZZ))
fuzz: $(addprefix $(FUZZ_O)/,$(SELECTED_FUZZ))
	@echo "fuzz targets: $(SELECTED_FUZZ)"
	@$(if $(FUZZ_TIME)$(FUZZ_CPU),FUZZ_JOBS='$(FUZZ_JOBS)' \
	   FUZZ_CLOCK=$(if $(FUZZ_CPU),cpu,wall) mk/fuzz.sh $(FUZZ_O) $(or $(FUZZ_CPU),$(FUZZ_TIME)) \
	   $(foreach t,$(SELECTED_FUZZ),'$(t)|$(FUZZ_DICT_$(t))|$(strip $(FUZZ_CORPUS_$(t)))'),true)

BENCH ?=
SELECTED_BENCH := $(if $(BENCH),$(filter $(BENCH),$(ALL_BENCH)),$(ALL_BENCH))
bench: $(foreach b,$(SELECTED_BENCH),$(BENCH_DEPS_$(b)))
	@$(foreach b,$(SELECTED_BENCH),echo "== bench $(b)" && \
	   KD_BUILD=$(abspath $(O)) KD_SRC=$(CURDIR) $(BENCH_SCRIPT_$(b)) && ) \
	 echo "bench: $(words $(SELECTED_BENCH)) benchmark(s) done"

# End-to-end suites against kdet-local: kubectl conformance, det, controller.
E2E_TESTS := test_local_conformance test_cli_kubectl test_det_% test_ctrl_e2e_%
e2e: export KD_SOAK_DURATION ?= 5m
e2e:
	@rm -f $(O)/tests/results; \
	 $(MAKE) --no-print-directory -j$(JOBS) check-run O=$(O) ONLY='$(E2E_TESTS)'; \
	 tests/total $(O)/tests/results

# The soak test (docs/soak.md): a mixed workload under random faults, invariants checked
# all along; DURATION=30m (default 5m), SEED=N makes the same random choices again.
DURATION ?= 5m
SEED ?=
soak: $(TEST_DEPS_test_ctrl_e2e_soak)
	@KD_SRC=$(CURDIR) KD_BUILD=$(abspath $(O)) KD_SOAK_DURATION=$(DURATION) KD_SOAK_SEED=$(SEED) \
	 e2e/soak/soak.py

# The same kind of suites against a real upstream control plane built from
# Debian's kubernetes source package (cached after the first, cold build).
# As root it also runs the real-node suites, which install the images of
# `make images` with helm: those are built first (cached likewise).
e2e-real: $(O)/bin/det $(O)/bin/kdet-local $(O)/bin/kdet-controller $(O)/bin/kdet-launch $(O)/bin/fashion-mnist-c
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory O=$(O) images; fi
	@KD_SRC=$(CURDIR) KD_BUILD=$(abspath $(O)) e2e/kube/run.sh

# The end-to-end demo (mk/demo.sh): make deps, build, det deploy local up,
# an adaptive ASHA search of examples/fashion-mnist-c, the best trial; the
# cluster stays up.
demo:
	@O=$(O) mk/demo.sh

format:
	@mk/lint.sh --fix

clean:
	rm -rf build build-asan build-fuzz

help:
	@echo "make            build everything into $(O)/"
	@echo "make check      all tests, then again under ASan+UBSan (ONLY=test_glob to select)"
	@echo "make check-quick  the tests without the 'slow' tag, no sanitizers"
	@echo "make deps       install the Debian packages (and npm tools) the project needs"
	@echo "make lint       clang-format check and banned functions"
	@echo "make bench      benchmarks, each side by side with its anchor"
	@echo "make fuzz       build the libFuzzer targets (clang) into build-fuzz/; FUZZ_TIME=1h"
	@echo "                runs each for that long, one after the other (FUZZ=name selects)"
	@echo "make demo       the end-to-end demo"
	@echo "make e2e        the end-to-end suites against kdet-local"
	@echo "make soak       DURATION=30m: a mixed workload under random faults (docs/soak.md)"
	@echo "make e2e-real   the suites against a real control plane; as root also two real nodes"
	@echo "                (kubelet on containerd) and a helm install of the images"
	@echo "make images     OCI images (kdet-controller, kdet-trainer, kdet-postgresql), as root"

# k3c: the two commands of the README, and a few conveniences.
#   make demo           set up, build, and run the main job on the embedded tiny model
#   make test           set up, build, and run every test (CTest: unit + lit)
#   make mutants        source mutants of scripts/mutants.txt; the suite must catch each
#   make test-sanitize  the runtime-side tests under ASan + UBSan (in build-asan)
#   make fuzz           build the libFuzzer targets (build-fuzz) and run each
#                       for FUZZ_SECONDS (scripts/fuzz.sh)
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_DIR ?= $(BUILD_DIR)/demo
ASAN_DIR ?= build-asan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 20
# Runtime only (MLIR's static libraries are not sanitized), no CUDA; any
# sanitizer report fails the test that made it.
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all \
                  -fno-omit-frame-pointer -g

.PHONY: setup build demo test test-sanitize fuzz clean

setup:
	@BUILD_DIR=$(BUILD_DIR) scripts/setup.sh

build: setup
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD_DIR) $(DEMO_DIR)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# setup.sh installs what is missing and, the first time, configures
# $(ASAN_DIR) with the flags from the environment (CMake's CFLAGS/CXXFLAGS).
# -O1 (ASan's usual level): builds in half the time of -O3 on 2 cores, and
# the tests run about as fast. The tests that decode run plans compiled by
# the normal build's k3c (the sanitized build has no compiler).
test-sanitize: build
	@CFLAGS="$(SANITIZE_FLAGS)" CXXFLAGS="$(SANITIZE_FLAGS)" \
	  LDFLAGS="-fsanitize=address,undefined" K3C_COMPILER=OFF \
	  BUILD_DIR=$(ASAN_DIR) scripts/setup.sh
	@cmake -S . -B $(ASAN_DIR) -DK3C_ENABLE_CUDA=OFF \
	  -DK3C_TEST_K3C=$(abspath $(BUILD_DIR))/bin/k3c \
	  -DCMAKE_C_FLAGS_RELEASE=-O1 -DCMAKE_CXX_FLAGS_RELEASE=-O1 >/dev/null
	@cmake --build $(ASAN_DIR) -j $(JOBS)
	@cd $(ASAN_DIR) && \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS)

fuzz:
	@FUZZ_BUILD_DIR=$(FUZZ_DIR) FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) \
	  scripts/fuzz.sh all

# Source mutants (scripts/mutants.sh, README "Mutants"): every bug listed in
# scripts/mutants.txt, applied to a private copy, must make the test suite
# fail. On demand only (about 45 min on 2 cores); MUTANTS="ID ... --full"
# passes mutant ids and options through.
.PHONY: mutants
mutants: setup
	@JOBS=$(JOBS) scripts/mutants.sh $(MUTANTS)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)

# k3c: the two commands of the README, and a few conveniences.
#   make demo   set up, build, and run the main job on the embedded tiny model
#   make test   set up, build, and run every test (CTest: unit + lit)
#   make mutants  source mutants of scripts/mutants.txt; the suite must catch each
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_DIR ?= $(BUILD_DIR)/demo

.PHONY: setup build demo test clean

setup:
	@BUILD_DIR=$(BUILD_DIR) scripts/setup.sh

build: setup
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD_DIR) $(DEMO_DIR)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Source mutants (scripts/mutants.sh, README "Mutants"): every bug listed in
# scripts/mutants.txt, applied to a private copy, must make the test suite
# fail. On demand only (about 45 min on 2 cores); MUTANTS="ID ... --full"
# passes mutant ids and options through.
.PHONY: mutants
mutants: setup
	@JOBS=$(JOBS) scripts/mutants.sh $(MUTANTS)

clean:
	rm -rf $(BUILD_DIR)

# The README's two commands: `make run` and `make test`. Both install what is missing first.
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)

.PHONY: run test build bench bootstrap configure format clean fuzz console-deps

bootstrap:
	@scripts/bootstrap.sh

configure: bootstrap
	@test -f $(BUILD_DIR)/build.ninja || cmake --preset $(PRESET) >/dev/null

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: the control-plane server on the demo fleet, with simulated agents. It prints the
# URL, its admin token (the same after a restart: kept in DATA) and commands to paste. LISTEN and
# DATA override the defaults.
LISTEN ?= 127.0.0.1:8080
DATA ?= ./tessera-data
run: build
	$(BUILD_DIR)/tessera server --demo --listen $(LISTEN) --data $(DATA)

# The tests, then every fuzzer briefly (TEST_FUZZ_SECONDS each; 0 skips them), so CI runs the
# fuzz targets under clang's sanitizers too. ctest already replays their corpora.
TEST_FUZZ_SECONDS ?= 5
test: build console-deps
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	@if [ "$(TEST_FUZZ_SECONDS)" != 0 ]; then FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) scripts/fuzz.sh; fi

# Every fuzz target for FUZZ_SECONDS each, built with clang in build/fuzz (scripts/fuzz.sh says
# more; FUZZ_MERGE=1 keeps the new inputs in fuzz/corpus/).
FUZZ_SECONDS ?= 60
fuzz: bootstrap
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) scripts/fuzz.sh

# The console's browser tests run on Node.js with playwright-core, from the npm registry.
console-deps: bootstrap
	@scripts/console-deps.sh

bench: build
	@scripts/bench.sh $(BUILD_DIR)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build

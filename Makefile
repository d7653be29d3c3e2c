# The README's two commands: `make run` and `make test`. Both install what is missing first.
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)

.PHONY: run test build bench bootstrap configure format clean

bootstrap:
	@scripts/bootstrap.sh

configure: bootstrap
	@test -f $(BUILD_DIR)/build.ninja || cmake --preset $(PRESET) >/dev/null

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: the control-plane server on the demo fleet, with simulated agents. It prints the
# URL, a fresh admin token and commands to paste. LISTEN and DATA override the defaults.
LISTEN ?= 127.0.0.1:8080
DATA ?= ./tessera-data
run: build
	$(BUILD_DIR)/tessera server --demo --listen $(LISTEN) --data $(DATA)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

bench: build
	@scripts/bench.sh $(BUILD_DIR)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build

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

# Until the control-plane server lands, the main job is a short demo of the catalog and the planner.
run: build
	@scripts/demo.sh $(BUILD_DIR)/tessera

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

bench: build
	@scripts/bench.sh $(BUILD_DIR)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build

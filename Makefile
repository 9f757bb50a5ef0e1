# Set-up and everyday commands. `make demo` installs tvmc and runs the main job;
# `make test` installs the test dependencies and runs the fast tests; `make bench` times tvmc
# against onnxruntime at 1 and 2 threads, `make bench-layers` ResNet-18's conv layers against the
# machine's peak; `make conformance` runs the ONNX backend node cases through tvmc on x86 and
# rewrites docs/conformance.md; `make tune-demo` tunes ResNet-18 and three conv2d tasks and writes
# bench/results/tune_demo.md (bench/tune_demo.py; waits for an idle machine first); `make tune-replay`
# measures every config of its 56x56 task (~40 min, once) and replays (b)'s tuners on it for 40 seeds.
# `make fuzz` runs tests/unit/test_fuzz.py with FUZZ_EXAMPLES random examples per fuzz test (the
# fast derandomized sample runs in `make test`), the runtime's buffers between guard pages and
# the C API's parsers under AddressSanitizer.
PYTHON ?= python3

FUZZ_EXAMPLES ?= 400

.PHONY: install demo test test-all fuzz bench bench-layers conformance tune-demo tune-replay

install:
	$(PYTHON) -m pip install -e ".[test,bench]"

demo: install
	$(PYTHON) -m tvmc.demo

test: install
	$(PYTHON) -m pytest -q -m "not slow" tests

test-all: install
	$(PYTHON) -m pytest -q tests

fuzz: install
	TVMC_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) TVMC_GUARD_PAGES=1 $(PYTHON) -m pytest -q -p no:cacheprovider tests/unit/test_fuzz.py

bench: install
	$(PYTHON) bench/bench.py

bench-layers: install
	$(PYTHON) bench/layers.py

conformance: install
	$(PYTHON) -m tvmc.conformance

tune-demo: install
	$(PYTHON) -m pip install -e ".[tune]"
	$(PYTHON) bench/tune_demo.py

tune-replay: install
	$(PYTHON) -m pip install -e ".[tune]"
	$(PYTHON) bench/tune_replay.py --sweep

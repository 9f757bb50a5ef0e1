# Set-up and everyday commands. `make demo` installs tvmc and reads a line of text with PP-OCRv4;
# `make lint` runs ruff (pyproject.toml's [tool.ruff]); `make test` installs the test dependencies,
# lints and runs the fast tests (`make test-all` the slow ones too: every op case on OpenCL, on ARM
# under qemu-user and on wasm, the light models there);
# `make test-cuda` runs the tests marked cuda (op cases, e2e models, a conformance sample on an
# NVIDIA GPU; they skip without one), `make gpu-check` those and the CUDA bench in one timed script; `make bench` times tvmc's builds for every CPU descriptor of
# the host's architecture that it runs (x86-64: x86, x86-avx2, x86-64; aarch64: arm-neoverse-n1,
# arm-cortex-a72, arm) against onnxruntime at 1 and 2 threads (`make bench TARGET=cuda`: on the
# GPU against onnxruntime's CUDA provider and torch eager, untuned and tuned with CUDA_TUNE_TRIALS
# measurements per model, bench/bench_cuda.py), `make bench-int8` the int8 models against tvmc float and
# onnxruntime int8 (bench/results/int8.md), `make bench-layers` ResNet-18's conv layers against
# the machine's peak (measured by an FMA loop); `make winograd-table` re-measures the conv2d cost tables
# configs/winograd/<target>.json (direct, im2col, F(2x2), F(4x4) per 3x3 conv class, bench/winograd_table.py;
# schema configs/winograd/schema.json) for every x86 descriptor this host runs; `make conformance [TARGET=opencl|arm|wasm|cuda]` runs the ONNX backend node
# cases through tvmc on x86 (or TARGET; arm under qemu-user) and rewrites docs/conformance.md
# (TARGET: docs/conformance-TARGET.md and its row in docs/conformance.md; COMPILE_ONLY=1 compiles
# each case without running it, for a GPU target on a machine without the GPU); `make tune-demo` tunes ResNet-18 and three conv2d tasks and writes
# bench/results/tune_demo.md (bench/tune_demo.py; waits for an idle machine first); `make tune-replay`
# measures every config of its 56x56 task (~40 min, once) and replays (b)'s tuners on it for 40 seeds;
# `make bench-kernels [GPU_TARGET=opencl]` writes the per-kernel table (launch, shared memory, bytes per
# FLOP) of ResNet-18 and the BERT-style encoder for a GPU target (bench/kernels.py);
# `make bench-dynamic` times range artifacts against one artifact per size and onnxruntime (bench/bench_dynamic.py, bench/results/symbolic_dynamic.md);
# `make bench TARGET=wasm` times the wasm build in Node with tvmc.js beside onnxruntime-web
# (bench/web_bench.py, bench/web/bench.mjs; writes bench/results/web_bench.md), with INT8=1 the int8
# models against onnxruntime-web's int8 (bench/web_bench.py --int8; bench/results/web_bench_int8.md);
# `make fuzz` runs tests/unit/test_fuzz.py with FUZZ_EXAMPLES random examples per fuzz test (the
# fast derandomized sample runs in `make test`), the runtime's buffers between guard pages and
# the C API's parsers under AddressSanitizer.
PYTHON ?= python3
TARGET ?= native
GPU_TARGET ?= opencl
EXTRAS ?= test,bench
CUDA_TUNE_TRIALS ?= 400

FUZZ_EXAMPLES ?= 400

.PHONY: install test-deps demo lint test test-all test-cuda gpu-check fuzz bench bench-int8 bench-dynamic bench-layers winograd-table bench-vector bench-kernels e2e-report conformance tune-demo tune-replay

# pip installs tvmc and its Python dependencies; tvmc.toolchain installs the Debian packages the
# shipped target descriptors name (cross linker, emulator, wasm toolchain, browser) where apt-get
# can run; npm installs bench/web's packages (onnxruntime-web, playwright-core) where npm exists
# (the web tests and make bench TARGET=wasm need them, and skip or stop naming them otherwise).
install:
	$(PYTHON) -m pip install -e ".[$(EXTRAS)]"
	$(PYTHON) -m tvmc.toolchain install
	@if command -v npm >/dev/null 2>&1; then npm install --prefix bench/web --no-audit --no-fund --silent \
		|| echo "note: npm install in bench/web failed; the web tests will skip"; \
	else echo "note: npm not found; the web tests will skip (apt-get install npm)"; fi

# The demo's model is the .onnx file inside rapidocr-onnxruntime: installed without its
# dependencies (OpenCV, Shapely, ...), which the demo never imports; its Python bound (<3.13)
# concerns that code, not the model file.
demo: EXTRAS = test,bench,demo
demo: install
	$(PYTHON) -m pip install --no-deps --ignore-requires-python "rapidocr-onnxruntime==1.4.4"
	$(PYTHON) -m tvmc.demo

# The torch.onnx export tests (tests/e2e/test_torch_exports.py) need torch: its CPU build 2.13.0
# lies on this kind of machine's disk, while a plain `torch` requirement would download a CUDA
# build of several GB; without it those tests skip, naming torch.
TORCH_CPU ?= torch==2.13.0
test-deps: install
	($(PYTHON) -m pip install "$(TORCH_CPU)" && $(PYTHON) -m pip install -e ".[exports]") || \
	  echo "note: $(TORCH_CPU) could not be installed; the torch export tests will skip"

lint:
	$(PYTHON) -m ruff check .

# The tests run on every core (pytest-xdist), each test file on one worker (its module fixtures
# built once); PYTEST_WORKERS= runs them in this process.
PYTEST_WORKERS ?= -n auto --dist loadfile

# lint first: a ruff finding fails make test before any test runs
test: test-deps
	@$(MAKE) --no-print-directory lint
	$(PYTHON) -m pytest -q $(PYTEST_WORKERS) -m "not slow" tests

test-all: test-deps
	$(PYTHON) -m pytest -q $(PYTEST_WORKERS) tests

fuzz: install
	TVMC_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) TVMC_GUARD_PAGES=1 $(PYTHON) -m pytest -q -p no:cacheprovider tests/unit/test_fuzz.py

test-cuda: install
	$(PYTHON) -m pytest -q -m cuda tests

# The GPU checks in one script on an NVIDIA GPU machine (bench/gpu_check.sh: set-up without network,
# the tests marked cuda, make bench TARGET=cuda's rows in float32 and float16, tuned and untuned);
# results in OUT (default bench/results/gpu_check).
gpu-check:
	PYTHON=$(PYTHON) bench/gpu_check.sh

# TARGET=cuda: torch and onnx2torch come with the cuda-bench extra; onnxruntime's CUDA provider needs
# onnxruntime-gpu in place of onnxruntime (pip uninstall onnxruntime; pip install onnxruntime-gpu).
bench: install
ifeq ($(TARGET)$(INT8),wasm1)
	$(PYTHON) bench/web_bench.py --int8 --out bench/results/web_bench_int8.md
else ifeq ($(TARGET),wasm)
	$(PYTHON) bench/web_bench.py --out bench/results/web_bench.md
else ifeq ($(TARGET),cuda)
	$(PYTHON) -m pip install -e ".[cuda-bench]"
	$(PYTHON) bench/bench_cuda.py --tune-trials $(CUDA_TUNE_TRIALS) --out bench/results/cuda.md
else
	$(PYTHON) bench/bench.py
endif

# int8 rows (issue 28): quantized ResNet-style CNNs (QDQ, quantize_static) and the BERT-style encoder
# (quantize_dynamic), tvmc int8 against tvmc float and onnxruntime int8 at 1 and 2 threads on x86 with
# VNNI and on x86-avx2 (bench/int8_models.py); writes bench/results/int8.md.
bench-int8: install
	$(PYTHON) bench/int8_models.py --sizes 32,64 --bert --out bench/results/int8.md

bench-dynamic: install
	$(PYTHON) bench/bench_dynamic.py --write

bench-layers: install
	$(PYTHON) bench/layers.py --target $(TARGET)

# The cost tables winograd_tile_size reads (tvmc/ops/cpu/conv2d_winograd.py); commit the rewritten files.
winograd-table: install
	$(PYTHON) bench/winograd_table.py

# Vectorization evidence from the generated assembly (no timing): hot loops of ResNet-18's convs
# and the BERT encoder's dense layers for a CPU TARGET (e.g. make bench-vector TARGET=arm); INT8=1: of
# their int8 builds (make bench-vector TARGET=arm-neoverse-n1:features=+i8mm INT8=1).
bench-vector: install
	$(PYTHON) bench/vector_report.py --target $(TARGET) $(if $(INT8),--int8) \
		--out bench/results/vector_$(if $(INT8),int8_)$(subst :features=+,-,$(TARGET)).md

# The end-to-end table of a TARGET (each tests/e2e model against onnxruntime: max error, the tests'
# bound; under qemu-user for arm, wasmtime for wasm): bench/e2e_report.py, no timing.
e2e-report: install
	$(PYTHON) bench/e2e_report.py --target $(TARGET) --out bench/results/e2e_$(TARGET).md

bench-kernels: install
	$(PYTHON) bench/kernels.py --target $(GPU_TARGET)

conformance: install
	$(PYTHON) -m tvmc.conformance --target $(TARGET) $(if $(COMPILE_ONLY),--compile-only)

tune-demo: install
	$(PYTHON) -m pip install -e ".[tune]"
	$(PYTHON) bench/tune_demo.py

tune-replay: install
	$(PYTHON) -m pip install -e ".[tune]"
	$(PYTHON) bench/tune_replay.py --sweep

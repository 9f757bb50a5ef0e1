# Set-up and everyday commands. `make demo` installs tvmc and runs the main job;
# `make test` installs the test dependencies and runs the fast tests; `make test-cuda` runs the tests
# marked cuda (op cases, e2e models, a conformance sample on an NVIDIA GPU; they skip without one);
# `make bench` times tvmc against onnxruntime at 1 and 2 threads (`make bench TARGET=cuda`: on the
# GPU against onnxruntime's CUDA provider and torch eager, untuned and tuned with CUDA_TUNE_TRIALS
# measurements per model, bench/bench_cuda.py), `make bench-layers` ResNet-18's conv layers against the
# machine's peak; `make conformance [TARGET=opencl|cuda]` runs the ONNX backend node cases through tvmc on
# x86 (or TARGET) and rewrites docs/conformance.md (TARGET: docs/conformance-TARGET.md and its row
# in docs/conformance.md); `make tune-demo` tunes ResNet-18 and three conv2d tasks and writes
# bench/results/tune_demo.md (bench/tune_demo.py; waits for an idle machine first); `make tune-replay`
# measures every config of its 56x56 task (~40 min, once) and replays (b)'s tuners on it for 40 seeds;
# `make bench-kernels [GPU_TARGET=opencl]` writes the per-kernel table (launch, shared memory, bytes per
# FLOP) of ResNet-18 and the BERT-style encoder for a GPU target (bench/kernels.py).
PYTHON ?= python3
TARGET ?= native
GPU_TARGET ?= opencl
CUDA_TUNE_TRIALS ?= 400

.PHONY: install demo test test-all test-cuda bench bench-layers bench-vector bench-kernels conformance tune-demo tune-replay

# pip installs tvmc and its Python dependencies; tvmc.toolchain installs the Debian packages the
# shipped target descriptors name (cross linker, emulator) where apt-get can run.
install:
	$(PYTHON) -m pip install -e ".[test,bench]"
	$(PYTHON) -m tvmc.toolchain install

demo: install
	$(PYTHON) -m tvmc.demo

test: install
	$(PYTHON) -m pytest -q -m "not slow" tests

test-all: install
	$(PYTHON) -m pytest -q tests

test-cuda: install
	$(PYTHON) -m pytest -q -m cuda tests

# TARGET=cuda: torch and onnx2torch come with the cuda-bench extra; onnxruntime's CUDA provider needs
# onnxruntime-gpu in place of onnxruntime (pip uninstall onnxruntime; pip install onnxruntime-gpu).
bench: install
ifeq ($(TARGET),cuda)
	$(PYTHON) -m pip install -e ".[cuda-bench]"
	$(PYTHON) bench/bench_cuda.py --tune-trials $(CUDA_TUNE_TRIALS) --out bench/results/cuda.md
else
	$(PYTHON) bench/bench.py
endif

bench-layers: install
	$(PYTHON) bench/layers.py

# Vectorization evidence from the generated assembly (no timing): hot loops of ResNet-18's convs
# and the BERT encoder's dense layers for a CPU TARGET (e.g. make bench-vector TARGET=arm).
bench-vector: install
	$(PYTHON) bench/vector_report.py --target $(TARGET) --out bench/results/vector_$(TARGET).md

bench-kernels: install
	$(PYTHON) bench/kernels.py --target $(GPU_TARGET)

conformance: install
	$(PYTHON) -m tvmc.conformance --target $(TARGET)

tune-demo: install
	$(PYTHON) -m pip install -e ".[tune]"
	$(PYTHON) bench/tune_demo.py

tune-replay: install
	$(PYTHON) -m pip install -e ".[tune]"
	$(PYTHON) bench/tune_replay.py --sweep

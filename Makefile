# Set-up and everyday commands. `make demo` installs tvmc and reads a line of text with PP-OCRv4;
# `make test` installs the test dependencies and runs the fast tests; `make bench` times tvmc's
# builds for every x86 descriptor this host runs (x86, x86-avx2, x86-64) against onnxruntime at 1
# and 2 threads, `make bench-layers` ResNet-18's conv layers against the
# machine's peak; `make conformance` runs the ONNX backend node cases through tvmc on x86 and
# rewrites docs/conformance.md; `make tune-demo` tunes ResNet-18 and three conv2d tasks and writes
# bench/results/tune_demo.md (bench/tune_demo.py; waits for an idle machine first); `make tune-replay`
# measures every config of its 56x56 task (~40 min, once) and replays (b)'s tuners on it for 40 seeds.
PYTHON ?= python3
EXTRAS ?= test,bench

.PHONY: install demo test test-all bench bench-layers conformance tune-demo tune-replay

install:
	$(PYTHON) -m pip install -e ".[$(EXTRAS)]"

# The demo's model is the .onnx file inside rapidocr-onnxruntime: installed without its
# dependencies (OpenCV, Shapely, ...), which the demo never imports; its Python bound (<3.13)
# concerns that code, not the model file.
demo: EXTRAS = test,bench,demo
demo: install
	$(PYTHON) -m pip install --no-deps --ignore-requires-python "rapidocr-onnxruntime==1.4.4"
	$(PYTHON) -m tvmc.demo

test: install
	$(PYTHON) -m pytest -q -m "not slow" tests

test-all: install
	$(PYTHON) -m pytest -q tests

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

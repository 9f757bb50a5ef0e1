#!/usr/bin/env bash
# make gpu-check: the GPU checks of issue 31 in one run, on a machine with an NVIDIA GPU.
#
#   1. set-up: the wheels in .whl/ (if any: Python packages the machine lacks, see the device
#      README) into /tmp/site, and this checkout installed in place (pip --no-deps: nothing fetched);
#   2. the GPU: nvidia-smi and the sm_XY tvmc compiles for;
#   3. the tests marked cuda in GPU_CHECK_TESTS (default: all of tests/; GPU_CHECK_WORKERS processes),
#      log in $OUT/pytest_cuda.log;
#   4. bench/bench_cuda.py: ResNet-18, MobileNetV2 and the BERT-style encoder at batch 1 and 16,
#      float32 and mixed float16, untuned and tuned (BENCH_ARGS), against torch eager, report in
#      $OUT/cuda.md and the tuning records in $OUT/records/;
#   5. when GPU_CHECK_FULL_S > 0, every other test marked cuda (all of tests/ but GPU_CHECK_TESTS),
#      log in $OUT/pytest_all.log;
#   6. when GPU_CHECK_INT8_S > 0, bench/int8_gpu.py: the dp4a int8 kernels against the generic int8
#      and the float32 kernels of the same shapes (device ms) for GPU_CHECK_INT8_TARGET (cuda-sm90),
#      report in $OUT/int8_gpu.txt;
#   7. when GPU_CHECK_OPENCL_S > 0, the NVIDIA OpenCL driver: libnvidia-opencl.so.1 registered by an
#      nvidia.icd in a folder named by OCL_ICD_VENDORS (the machine registers only PoCL), its
#      platform, device and extensions (cl_khr_fp16?) in $OUT/opencl.txt, then GPU_CHECK_OPENCL_TESTS
#      (the OpenCL schedule, dtype and CLI tests) on that GPU, log in $OUT/pytest_opencl.log.
#
# Each step has its own time limit (seconds: GPU_CHECK_TEST_S, GPU_CHECK_BENCH_S, GPU_CHECK_FULL_S),
# so that the whole run fits a lease; a step that runs out leaves its log (pytest runs verbose, one
# line per test). OUT defaults to bench/results/gpu_check.
set -uo pipefail
OUT=${OUT:-bench/results/gpu_check}
PY=${PYTHON:-python3}
TEST_S=${GPU_CHECK_TEST_S:-150}
BENCH_S=${GPU_CHECK_BENCH_S:-300}
WORKERS=${GPU_CHECK_WORKERS:-8}
BENCH_ARGS=${BENCH_ARGS:---models resnet18,mobilenet_v2,bert --batches 1,16 --precisions fp32,fp16 --repeat 20}
TESTS=${GPU_CHECK_TESTS:-tests}
FULL_S=${GPU_CHECK_FULL_S:-0}
mkdir -p "$OUT"
say() { echo "[gpu-check $(date +%T)] $*"; }

if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -m pip install -q --no-deps --no-build-isolation -e . >/tmp/gpu_check_install.log 2>&1 || { say "install failed"; cat /tmp/gpu_check_install.log; exit 1; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
$PY -c "from tvmc.runtime.cuda import gpu_info; print('tvmc compiles for', gpu_info())" | tee -a "$OUT/gpu.txt"
say "ptxas: $(command -v ptxas || echo 'not on PATH')"

say "tests marked cuda (limit ${TEST_S}s)"
timeout "$TEST_S" $PY -m pytest -v -rfE -m cuda -p no:cacheprovider -n "$WORKERS" $TESTS >"$OUT/pytest_cuda.log" 2>&1
say "pytest exit $?: $(tail -1 "$OUT/pytest_cuda.log")"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -30

say "bench (limit ${BENCH_S}s): $BENCH_ARGS"
timeout "$BENCH_S" $PY bench/bench_cuda.py $BENCH_ARGS --out "$OUT/cuda.md" 2>&1 | tee "$OUT/bench.log" | tail -60
say "bench exit ${PIPESTATUS[0]}"
if [ -d bench/results/cuda_records ]; then mkdir -p "$OUT/records" && cp bench/results/cuda_records/*.json "$OUT/records/" 2>/dev/null; fi
if [ "$FULL_S" -gt 0 ]; then
  say "the other tests marked cuda (limit ${FULL_S}s)"
  deselect=(); for t in $TESTS; do deselect+=(--deselect "$t"); done
  timeout "$FULL_S" $PY -m pytest -v -rfE -m cuda -p no:cacheprovider -n "$WORKERS" tests "${deselect[@]}" \
    >"$OUT/pytest_all.log" 2>&1
  say "pytest exit $?: $(grep -c PASSED "$OUT/pytest_all.log") passed; $(tail -1 "$OUT/pytest_all.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_all.log" | head -30
fi
INT8_S=${GPU_CHECK_INT8_S:-0}
if [ "$INT8_S" -gt 0 ]; then
  say "int8 kernels (limit ${INT8_S}s)"
  timeout "$INT8_S" $PY bench/int8_gpu.py --target "${GPU_CHECK_INT8_TARGET:-cuda-sm90}" --repeat 50 2>&1 \
    | tee "$OUT/int8_gpu.txt" | tail -20
fi
OPENCL_S=${GPU_CHECK_OPENCL_S:-0}
OPENCL_TESTS=${GPU_CHECK_OPENCL_TESTS:-tests/ops/test_gpu_schedules.py tests/unit/test_opencl_dtypes.py tests/e2e/test_opencl_cli.py}
if [ "$OPENCL_S" -gt 0 ]; then
  icd=$(mktemp -d) && echo libnvidia-opencl.so.1 >"$icd/nvidia.icd"
  say "NVIDIA OpenCL through OCL_ICD_VENDORS=$icd (limit ${OPENCL_S}s)"
  OCL_ICD_VENDORS=$icd $PY -c "
import pyopencl as cl
for p in cl.get_platforms():
    for d in p.get_devices():
        print(p.name, '|', d.name, '| OpenCL C', d.opencl_c_version, '| fp16:', 'cl_khr_fp16' in d.extensions)
        print('extensions:', d.extensions)" 2>&1 | tee "$OUT/opencl.txt"
  OCL_ICD_VENDORS=$icd timeout "$OPENCL_S" $PY -m pytest -v -rfE -p no:cacheprovider -n "$WORKERS" \
    $OPENCL_TESTS >"$OUT/pytest_opencl.log" 2>&1
  say "pytest exit $?: $(tail -1 "$OUT/pytest_opencl.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_opencl.log" | head -20
fi
say "done"

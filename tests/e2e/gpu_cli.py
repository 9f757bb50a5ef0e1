"""Shared by the GPU targets' CLI tests (test_opencl_cli.py, test_cuda_cli.py): an MLP compiled by
`tvmc compile`, run by `tvmc run --device` against onnxruntime, profiled kernel by kernel."""

from __future__ import annotations

import numpy as np
import onnx

from tests.e2e.builders import mlp
from tests.e2e.models import onnxruntime_outputs
from tests.e2e.test_cli_e2e import tvmc


def compile_mlp(folder, target: str) -> tuple:
    """`tvmc compile` of a small MLP (input x [2, 32], output y) for `target` into
    folder/mlp.tar (the model beside it as mlp.onnx); returns (folder, ModelProto)."""
    model = mlp(seed=3, batch=2, sizes=(32, 48, 16, 8))
    onnx.save(model, folder / "mlp.onnx")
    tvmc("compile", folder / "mlp.onnx", "--target", target, "-o", folder / "mlp.tar")
    return folder, model


def check_run_matches_onnxruntime(folder, model, device: str) -> None:
    """`tvmc run folder/mlp.tar --device DEVICE` prints the device and matches onnxruntime."""
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    np.savez(folder / "in.npz", x=x)
    res = tvmc("run", folder / "mlp.tar", "--device", device, "--inputs", folder / "in.npz", "--outputs",
               folder / "out.npz", "--print-time", "--repeat", "2")
    assert res.stdout.startswith("device: ")
    np.testing.assert_allclose(np.load(folder / "out.npz")["y"], onnxruntime_outputs(model, {"x": x})["y"],
                               rtol=1e-4, atol=1e-5)


def check_profile(tar, device: str) -> None:
    """The executor's profile times every kernel call, in graph order."""
    from tvmc.runtime import create_executor

    ex = create_executor(tar, device)
    ex.set_input("x", np.zeros((2, 32), np.float32))
    times = ex.profile()
    assert [name for name, _ in times] == [call[0] for call in ex._calls] and len(times) == ex.num_kernels
    assert all(ms >= 0 for _, ms in times)

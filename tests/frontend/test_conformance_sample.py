"""A representative sample of the ONNX backend node cases (the full run is `make conformance`),
driven through tvmc.backend exactly as tvmc/conformance.py runs them, on this host's CPU and (marked
cuda) on a GPU; plus the runner's own classification, comparison and report."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.targets import require
from tvmc import conformance
from tvmc.backend import TvmcBackend
from tvmc.errors import UnsupportedOpError

# name -> whether the case needs its shape inputs frozen into initializers
SAMPLE = {
    "test_abs": False, "test_add_bcast": False, "test_averagepool_2d_pads": False,
    "test_concat_3d_axis_1": False, "test_conv_with_strides_padding": False,
    "test_gemm_default_matrix_bias": False, "test_flatten_axis1": False, "test_globalaveragepool": False,
    "test_lrn": False, "test_matmul_3d": False, "test_maxpool_2d_strides": False,
    "test_reshape_negative_dim": True, "test_softmax_axis_1": False, "test_transpose_all_permutations_0": False,
    "test_unsqueeze_axis_0": True, "test_clip_default_min": False, "test_sum_two_inputs": False,
    "test_leakyrelu": False, "test_batchnorm_example": False, "test_shape": False,
    # operators added for the conformance issue
    "test_div_int32_trunc": False, "test_split_variable_parts_2d_opset18": True, "test_slice_neg_steps": True,
    "test_reduce_mean_keepdims_random": True, "test_argmax_keepdims_random_select_last_index": False,
    "test_where_example": False, "test_layer_normalization_3d_axis1_epsilon": False, "test_gather_negative_indices": False,
    "test_reflect_pad": True, "test_expand_dim_changed": True, "test_logsoftmax_axis_0": False,
    "test_gelu_tanh_2": False, "test_less_bcast": False, "test_depthtospace_crd_mode_example": False,
    "test_tile": True, "test_cumsum_1d_int32_exclusive": True, "test_instancenorm_example": False,
    "test_pow_types_int64_int64": False, "test_reduce_l2_empty_set": True,
    "test_maxpool_3d_dilations": False, "test_averagepool_1d_default": False, "test_top_k_smallest": True,
    "test_convtranspose_output_shape": False, "test_convtranspose_1d": False,
    "test_resize_upsample_scales_linear_align_corners": True, "test_resize_downsample_sizes_cubic": True,
    "test_resize_tf_crop_and_resize_axes_3_2": True, "test_upsample_nearest": True,
}


@pytest.fixture(scope="module")
def cases():
    return {c.name: c for c in conformance.collect_cases()}


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_node_case(cases, name):
    res = conformance.run_case(cases[name])
    assert res.status == "passed", res.reason
    assert res.frozen == SAMPLE[name]


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_node_case_on_cuda(cases, name, monkeypatch):
    """The same sample compiled for CUDA and run on a GPU (make conformance TARGET=cuda: all cases)."""
    require("cuda")
    monkeypatch.setattr(conformance, "TARGET", "cuda")
    res = conformance.run_case(cases[name])
    assert res.status == "passed", res.reason


def test_out_of_scope_and_dtype_skips(cases):
    assert conformance.run_case(cases["test_det_2d"]).reason == "not in scope"
    assert conformance.skip_reason(cases["test_cast_FLOAT_to_DOUBLE"]).startswith("dtype")


def test_unsupported_op_fails_at_compile_time(cases):
    with pytest.raises(UnsupportedOpError, match="Det"):
        TvmcBackend.prepare(cases["test_det_2d"].model)


def test_compare_rules():
    assert conformance.compare(np.float32([1, 2]), np.float32([1, 2.0000001]), 1e-3, 1e-7) is None
    assert "differ" in conformance.compare(np.float32([1, 2]), np.float32([1, 3]), 1e-3, 1e-7)
    assert conformance.compare(np.float32([np.nan]), np.float32([np.nan]), 1e-3, 1e-7) is None
    assert "exact" in conformance.compare(np.int64([1, 2]), np.int64([1, 3]), 1e-3, 1e-7)
    assert "shape" in conformance.compare(np.zeros((2, 1)), np.zeros(2), 1e-3, 1e-7)


def test_backend_interface():
    assert TvmcBackend.supports_device("CPU") and not TvmcBackend.supports_device("CUDA")
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    (y,) = TvmcBackend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_report(tmp_path):
    results = [conformance.Result("test_a", "Relu", "passed"),
               conformance.Result("test_b", "Relu", "failed", "output 0: 1/4 values differ"),
               conformance.Result("test_c", "Reshape", "passed", frozen=True),
               conformance.Result("test_d", "Det", "skipped", "not in scope")]
    text = conformance.write_report(results, str(tmp_path / "c.md"))
    assert "| Relu | 1 | 0 | 1 | 0 | 0 |" in text and "`test_b` (Relu, failed)" in text
    assert "Det (1)" in text and "66.7%" in text

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
    "test_reshape_negative_dim": False, "test_softmax_axis_1": False, "test_transpose_all_permutations_0": False,
    "test_unsqueeze_axis_0": True, "test_clip_default_min": False, "test_sum_two_inputs": False,
    "test_leakyrelu": False, "test_batchnorm_example": False, "test_shape": False,
    # operators added for the conformance issue
    "test_div_int32_trunc": False, "test_split_variable_parts_2d_opset18": True, "test_slice_neg_steps": True,
    "test_reduce_mean_keepdims_random": True, "test_argmax_keepdims_random_select_last_index": False,
    "test_where_example": False, "test_layer_normalization_3d_axis1_epsilon": False,
    "test_gather_negative_indices": False,
    "test_reflect_pad": True, "test_expand_dim_changed": True, "test_logsoftmax_axis_0": False,
    "test_gelu_tanh_2": False, "test_less_bcast": False, "test_depthtospace_crd_mode_example": False,
    "test_tile": True, "test_cumsum_1d_int32_exclusive": True, "test_instancenorm_example": False,
    "test_pow_types_int64_int64": False, "test_reduce_l2_empty_set": True,
    "test_maxpool_3d_dilations": False, "test_averagepool_1d_default": False, "test_top_k_smallest": False,
    "test_convtranspose_output_shape": False, "test_convtranspose_1d": False,
    "test_resize_upsample_scales_linear_align_corners": True, "test_resize_downsample_sizes_cubic": True,
    "test_resize_tf_crop_and_resize_axes_3_2": True, "test_upsample_nearest": True,
    # issue 18: one or two cases per new group (dtypes, elementwise, tensor, reduce, nn, quantization,
    # function bodies)
    "test_add_uint8": False, "test_cast_FLOAT_to_FLOAT16": False, "test_max_float64": False,
    "test_isnan_float16": False, "test_sin": False, "test_bitshift_right_int32_shift_ge_width": False,
    "test_mod_mixed_sign_float32": False, "test_bitcast_float32_to_int32": False, "test_mish": False,
    "test_gather_elements_negative_indices": False, "test_scatternd_add": False, "test_triu_neg": True,
    "test_cumprod_1d_reverse_exclusive": True, "test_reduce_log_sum_exp_keepdims_random": True,
    "test_hardmax_axis_1": False, "test_lppool_2d_pads": False, "test_quantizelinear_blocked_asymmetric": False,
    "test_qlinearmatmul_3D_uint8_float32": False, "test_rms_normalization_3d_axis_negative_1_epsilon": False,
    "test_attention_4d_gqa_with_past_and_present_fp16": False, "test_center_crop_pad_crop_and_pad": True,
    # issue 18, nn group: DeformConv, Col2Im, MaxPool Indices
    "test_deform_conv_with_mask_bias": False, "test_col2im_pads": True,
    "test_maxpool_with_argmax_2d_precomputed_strides": False,
    # issue 18, group B (misc ops)
    "test_det_nd": False, "test_einsum_batch_diagonal": False, "test_resize_downsample_scales_linear_antialias": True,
    # issue 18 point 5: data-dependent shapes
    "test_nonzero_example": False, "test_compress_0": False, "test_unique_sorted_with_axis": False,
    "test_nonmaxsuppression_suppress_by_IOU": False,
    # issue 18 point 2: FlexAttention (ai.onnx.preview, through its function body)
    "test_flexattention_causal_mask": False,
    # issue 18 point 2: DFT and STFT
    "test_dft_irfft": True, "test_stft_with_window": True,
    # training-mode Dropout with ratio 0 keeps every element (its ratio and mode inputs frozen)
    "test_training_dropout_zero_ratio_mask": True,
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


def test_scope_rules(cases):
    assert conformance.skip_reason(cases["test_det_2d"]) is None
    assert conformance.skip_reason(cases["test_cast_FLOAT_to_DOUBLE"]) is None
    assert conformance.skip_reason(cases["test_cast_FLOAT_to_BFLOAT16"]) == "dtype bfloat16"
    assert conformance.skip_reason(cases["test_regex_full_match_basic"]) == "string operator"
    assert conformance.skip_reason(cases["test_sce_mean"]) == "loss function"
    assert conformance.skip_reason(cases["test_sce_mean_expanded"]) == "loss function"
    assert conformance.skip_reason(cases["test_training_dropout"]) == "training mode"
    assert conformance.skip_reason(cases["test_training_dropout_default"]) == "training mode"
    assert conformance.skip_reason(cases["test_training_dropout_zero_ratio"]) is None
    assert conformance.skip_reason(cases["test_batchnorm_example_training_mode"]) == "training mode"
    assert conformance.skip_reason(cases["test_dropout_default"]) is None
    assert conformance.skip_reason(cases["test_sequence_insert_at_back"]).startswith("dtype")


def test_onnxruntime_side_by_side(cases):
    res = conformance.run_case(cases["test_abs"])
    assert (res.status, res.ort) == ("passed", "passed")


def test_unsupported_op_fails_at_compile_time(cases):
    with pytest.raises(UnsupportedOpError, match="TfIdfVectorizer"):
        TvmcBackend.prepare(cases["test_tfidfvectorizer_tf_only_bigrams_skip0"].model)


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
    results = [conformance.Result("test_a", "Relu", "passed", ort="passed"),
               conformance.Result("test_b", "Relu", "failed", "output 0: 1/4 values differ", ort="passed"),
               conformance.Result("test_c", "Reshape", "passed", frozen=True, ort="error"),
               conformance.Result("test_d", "FooBar", "error", "UnsupportedOpError", ort="error"),
               conformance.Result("test_e", "Relu", "skipped", "string operator")]
    results.append(conformance.Result("test_f", "DFT", "inexact", "expected data against the float64 evaluation: ...",
                                      ort="failed"))
    text = conformance.write_report(results, str(tmp_path / "c.md"))
    assert "| Relu | elementwise | 2 | 1 | 0 | 1 | 0 | 0 | 2 |" in text
    assert "| unsupported | 1 | 0 | 0 | 0 | 0 | 1 | 0 |" in text
    assert "| DFT | spectral | 1 | 0 | 0 | 0 | 1 | 0 | 0 |" in text
    assert "| inexact expected data (output agrees with the float64 evaluation) | 1 | 0 |" in text
    assert "- `test_f` (DFT; onnxruntime: failed): expected data against the float64 evaluation" in text
    assert "`test_b` (Relu, failed) **(onnxruntime passes)**" in text
    assert "| **pass rate** (5 cases) | **40.0%** | **40.0%** |" in text
    assert "Cases onnxruntime passes and tvmc does not: 1." in text and "string operator 1" in text


def test_rank0_outputs_of_two_reductions_on_opencl(cases, monkeypatch):
    """DynamicQuantizeLinear's scale and zero point are rank-0 outputs reading two reductions (min
    and max): with no loop to attach them at, the kernel's one thread computes them first
    (tvmc.ops.gpu.tiling.attach_reductions_per_thread)."""
    require("opencl")
    monkeypatch.setattr(conformance, "TARGET", "opencl")
    res = conformance.run_case(cases["test_dynamicquantizelinear"])
    assert res.status == "passed", res.reason


def test_backend_accepts_a_function_op_of_the_preview_domain(cases):
    assert TvmcBackend.is_compatible(cases["test_flexattention_soft_cap"].model)
    assert not TvmcBackend.is_compatible(cases["test_tfidfvectorizer_tf_only_bigrams_skip0"].model)
    assert conformance.op_group("FlexAttention") == "function body"


def test_inexact_expected_data_is_told_from_a_wrong_output(cases):
    """test_dft_inverse_opset19's expected data come from numpy's complex64 FFT: at the Nyquist bin
    of a real signal's inverse DFT they hold 1.9e-7 where the exact value is 0, beyond the case's
    atol of 1e-7. Output close to the float64 evaluation is 'inexact'; output off it stays 'failed'."""
    case = cases["test_dft_inverse_opset19"]
    inputs, expected = (conformance._arrays(v) for v in case.data_sets[0])
    (exact,) = conformance.float64_reference(case, inputs)
    assert exact.dtype == np.float64 and np.abs(exact[0, 5, :, 1]).max() < 1e-12  # Nyquist bin: real
    assert np.abs(expected[0][0, 5, :, 1]).min() > 1e-7  # the expected data's rounding error
    assert conformance._judge(case, inputs, expected, expected) == ("passed", "")
    status, reason = conformance._judge(case, inputs, expected, [exact.astype(np.float32)])
    assert status == "inexact" and "float64 evaluation" in reason
    off = exact.astype(np.float32)
    off[0, 5, 3, 1] = 3e-7  # wrong against both the expected data and the float64 evaluation
    assert conformance._judge(case, inputs, expected, [off])[0] == "failed"
    res = conformance.run_case(case, ort=False)
    assert res.status == "inexact", res.reason


def test_float64_promotion_refuses_models_naming_float32_elsewhere(cases):
    promoted = conformance.promote_to_float64(cases["test_dft_inverse_opset19"].model)
    assert promoted.graph.input[0].type.tensor_type.elem_type == 11  # DOUBLE
    for name in ("test_cast_FLOAT_to_DOUBLE", "test_constant", "test_if", "test_castlike_FLOAT_to_DOUBLE"):
        assert conformance.promote_to_float64(cases[name].model) is None, name


@pytest.mark.parametrize("name", ["test_conv_with_strides_padding", "test_attention_4d_gqa_with_past_and_present_fp16",
                                  "test_unsqueeze_axis_0"])
def test_compile_only_on_cuda(cases, name, monkeypatch):
    """--compile-only builds the CUDA module (PTX, and the cubin where ptxas is found) and its
    mod.tar without a GPU; a case tvmc cannot compile stays an error (make conformance TARGET=cuda
    COMPILE_ONLY=1: all cases)."""
    monkeypatch.setattr(conformance, "TARGET", "cuda")
    monkeypatch.setattr(conformance, "COMPILE_ONLY", True)
    res = conformance.run_case(cases[name], ort=False)
    assert res.status == "compiled", res.reason
    assert res.frozen == SAMPLE[name]
    assert conformance.run_case(cases["test_roialign_aligned_true"], ort=False).status == "error"


def test_report_compile_only(tmp_path):
    results = [conformance.Result("test_a", "Relu", "compiled", ort="passed"),
               conformance.Result("test_b", "Reshape", "compiled", frozen=True, ort="error"),
               conformance.Result("test_c", "FooBar", "error", "UnsupportedOpError", ort="passed"),
               conformance.Result("test_d", "Relu", "skipped", "string operator")]
    path = tmp_path / "c.md"
    text = conformance.write_report(results, str(path), target="cuda", compile_only=True)
    assert text.startswith("# ONNX backend node conformance (cuda, compile only)")
    assert "| compiled | 2 (frozen: 1) | - |" in text and "| passed | - | 2 |" in text
    assert "| Relu | elementwise | 1 | 1 | 0 | 0 | 1 |" in text
    assert "| Reshape | tensor | 1 | 1 | 1 | 0 | 0 |" in text
    assert "Cases onnxruntime passes and tvmc does not compile: 1." in text
    assert "inexact" not in text
    conformance.update_targets_table(str(path), "cuda", results, str(path), compile_only=True)
    assert "| `cuda` | not run: 2 compiled | - | - | 1 | 3 | - | [c.md](c.md) (compile only) |" in path.read_text()


def test_conformance_without_the_device_names_compile_only(capsys):
    """Without its GPU, a device target's run stops at once and says how to compile without running."""
    from tvmc.runtime import device_missing

    if device_missing("cuda") is None:
        pytest.skip("a CUDA device runs here")
    assert conformance.main(["--target", "cuda", "-k", "test_abs", "-o", "/dev/null"]) == 7
    assert "--compile-only" in capsys.readouterr().err

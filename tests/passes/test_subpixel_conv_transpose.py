"""SubpixelConvTranspose: a strided nn.conv2d_transpose becomes convolutions of its output phases
and a pixel shuffle (interpreter equivalence with the op's own scatter reference); e2e against
onnxruntime in tests/e2e/test_conv_transpose.py."""

import pytest

from pass_helpers import assert_equivalent, call, const, op_names, var
from tvmc.graph.ir import Graph
from tvmc.passes import PassContext, run_passes
from tvmc.target import resolve_target

X86 = resolve_target("x86")


def conv_transpose(x, o, k, strides, padding, output_padding=(0, 0), groups=1, dilation=(1, 1), seed=0):
    kh, kw = (k, k) if isinstance(k, int) else k
    w = const((x.shape[1], o // groups, kh, kw), "w", seed)
    return call("nn.conv2d_transpose", x, w, name="up", strides=strides, padding=padding, dilation=dilation,
                output_padding=output_padding, groups=groups)


def rewrite(graph, target=X86):
    return run_passes(graph, ["SubpixelConvTranspose"], PassContext(target=target))


@pytest.mark.parametrize("shape,o,k,strides,padding,output_padding,convs", [
    ((1, 8, 6, 7), 4, 4, (2, 2), (1, 1, 1, 1), (0, 0), 1),      # a U-Net's upsampling: 2 x 2 taps per phase
    ((1, 8, 5, 5), 6, 2, (2, 2), (0, 0, 0, 0), (0, 0), 1),      # 1 tap per phase: a 1x1 conv, no slice
    ((1, 4, 5, 6), 4, 3, (2, 2), (1, 1, 1, 1), (1, 1), 4),      # K = 3: phases of 2 and 1 taps, one conv each
    ((2, 3, 4, 5), 5, (5, 3), (3, 2), (2, 0, 1, 1), (2, 1), 6),  # rectangular, uneven pads, batch 2
    ((1, 4, 5, 5), 3, 3, (1, 1), (1, 1, 1, 1), (0, 0), 1),      # stride 1: one phase, the flipped kernel
    ((1, 4, 3, 3), 2, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1),      # K < S: phases without taps (zero kernels)
])
def test_strided_conv_transpose_is_phase_convolutions_and_a_pixel_shuffle(shape, o, k, strides, padding,
                                                                          output_padding, convs):
    x = var("x", shape)
    before = Graph([x], [call("nn.relu", conv_transpose(x, o, k, strides, padding, output_padding))])
    after = rewrite(before)
    names = op_names(after)
    assert "nn.conv2d_transpose" not in names and names.count("nn.conv2d") == convs, names
    assert names.count("transpose") == 1 and ("concatenate" in names) == (convs > 1)
    assert_equivalent(before, after)
    assert after.outputs[0].type == before.outputs[0].type


def test_grouped_dilated_or_negatively_padded_conv_transpose_and_gpu_targets_are_left_alone():
    x = var("x", (1, 4, 5, 5))
    for kwargs in ({"groups": 2}, {"dilation": (2, 2)}):
        g = Graph([x], [conv_transpose(x, 4, 3, (2, 2), (1, 1, 1, 1), **kwargs)])
        assert op_names(rewrite(g)) == ["nn.conv2d_transpose"]
    g = Graph([x], [conv_transpose(x, 4, 3, (2, 2), (-1, 0, 0, 0))])
    assert op_names(rewrite(g)) == ["nn.conv2d_transpose"]
    g = Graph([x], [conv_transpose(x, 4, 4, (2, 2), (1, 1, 1, 1))])
    assert op_names(rewrite(g, resolve_target("opencl"))) == ["nn.conv2d_transpose"]
    assert op_names(run_passes(g, ["SubpixelConvTranspose"], PassContext())) == ["nn.conv2d_transpose"]

"""Graph pass ToMixedPrecision: run the matrix operators (and what follows them) in float16 or
bfloat16, accumulating in float32 (TVM's relay.transform.ToMixedPrecision with its mixed_precision_type;
`tvmc compile --mixed-precision float16|bfloat16`).

Every float32 operator falls in one of three classes:

- ALWAYS (the pass's `ops` option; default conv2d, conv2d_transpose, dense, matmul): its float32
  inputs are cast to `dtype` and it computes in `dtype` (the kernels accumulate in float32: the
  lowering holds float16 and bfloat16 reductions in float32, the tensor-core kernels accumulate in
  float32 registers, tvmc/ops/gpu/tensorcore.py);
- FOLLOW (FOLLOW below: elementwise arithmetic and activations, data movement, pooling): in
  `dtype` when one of its inputs already is, its other float32 inputs cast too, else unchanged;
- NEVER (everything else: exp, log, power, sqrt, softmax, reductions such as sum and mean,
  normalizations): in float32, a `dtype` input cast back first (their range or accumulated error
  needs float32).

Graph inputs and outputs keep their dtypes (casts at the edges). Casts of constants (weights)
are folded at compile time by the FoldConstant that the driver runs right after this pass, so
the params hold `dtype` weights. Only float32 tensors change; float64, integer, float16 and
bfloat16 models are left as they are (such a model already computes in its 16-bit dtype).

The classes are the same for both dtypes, as in TVM (its default op lists do not depend on the
type): bfloat16 has float32's exponent range, so the NEVER ops would not overflow in it, but its
8 significant bits (float16: 11) make the accumulated error of a softmax, a normalization or a
reduction larger still, and those stay in float32.
"""

from __future__ import annotations

from tvmc.errors import ModelError, PassError
from tvmc.graph.ir import Call, Constant, Graph, rewrite
from tvmc.ops.registry import get_op, make_call
from tvmc.passes.pass_infra import graph_pass
from tvmc.te.expr import FLOAT16_DTYPES

DTYPES = FLOAT16_DTYPES  # float16, bfloat16
DEFAULT_OPS = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.matmul")
FOLLOW = frozenset({
    "add", "subtract", "multiply", "negative", "abs", "maximum", "minimum", "clip", "where",
    "nn.relu", "nn.leaky_relu", "nn.prelu", "nn.elu", "nn.selu", "sigmoid", "tanh", "nn.gelu",
    "reshape", "transpose", "concatenate", "strided_slice", "take", "pad", "broadcast_to", "layout_transform",
    "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d", "image.resize2d",
})
SOURCE = "float32"


def _cast(x, dtype: str, name: str):
    return make_call("cast", [x], {"dtype": dtype}, name=name)


@graph_pass("ToMixedPrecision", opt_level=0, options={"dtype": "float16", "ops": ",".join(DEFAULT_OPS)})
def to_mixed_precision(graph: Graph, ctx) -> Graph:
    """`graph` with the ALWAYS and FOLLOW operators in ctx's `dtype` (see the module docstring).
    Options: ToMixedPrecision.dtype (float16 or bfloat16), ToMixedPrecision.ops (comma-separated operator
    names, e.g. "nn.conv2d,nn.dense"). Raises PassError on another dtype or an unknown operator."""
    low = ctx.option("ToMixedPrecision", "dtype")
    if low not in DTYPES:
        raise PassError(f"ToMixedPrecision.dtype '{low}': supported {', '.join(DTYPES)}")
    always = {n.strip() for n in str(ctx.option("ToMixedPrecision", "ops")).split(",") if n.strip()}
    for name in sorted(always):
        try:
            get_op(name)
        except ModelError:
            raise PassError(f"ToMixedPrecision.ops: unknown operator '{name}'") from None

    def lowered(x, old, name):
        """Input `x` (new) of a low-precision op: cast when it is float32."""
        return _cast(x, low, f"{name}_to_{low}") if x.dtype == SOURCE else x

    def restored(x, old, name):
        """Input `x` (new) of a float32 op that was `old`'s dtype before the pass."""
        return _cast(x, old.dtype, f"{name}_to_{old.dtype}") if x.dtype == low and old.dtype != low else x

    def fn(e, new_inputs):
        if not isinstance(e, Call):
            return None
        name = e.name or (e.op if isinstance(e.op, str) else "call").replace(".", "_")
        pairs = list(zip(new_inputs, e.inputs))
        floats = [(x, old) for x, old in pairs if old.dtype == SOURCE]
        if isinstance(e.op, str) and e.dtype == SOURCE and floats:
            follows = e.op in FOLLOW and any(x.dtype == low for x, _ in floats)
            if e.op in always or follows:
                inputs = [lowered(x, old, name) if old.dtype == SOURCE else x for x, old in pairs]
                return make_call(e.op, inputs, e.attrs, name=e.name)
        if any(x.dtype == low and old.dtype != low for x, old in pairs):
            return Call(e.op, [restored(x, old, name) for x, old in pairs], e.attrs, e.type, e.name)
        return None

    out = rewrite(graph, fn)
    outputs = [restored(new, old, f"output{k}") if not isinstance(new, Constant) else new
               for k, (new, old) in enumerate(zip(out.outputs, graph.outputs))]
    return out.with_outputs(outputs)

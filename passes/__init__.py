"""Graph passes: Graph -> Graph transforms run under a PassContext (TVM's relay.transform)."""

from tvmc.passes.pass_infra import (PassContext, PassInfo, get_pass, graph_pass, list_passes, optimize,
                                    register_pass, run_passes)
# each pass module registers its pass on import
from tvmc.passes import (alter_op_layout, dead_code_elimination, eliminate_common_subexpr, gelu_fusion,  # noqa: F401
                         fake_quantization_to_integer, fold_constant, fold_quantized_chains, fold_scale_axis, fuse_ops,
                         plan_memory, simplify_expr, simplify_inference, subpixel_conv_transpose,
                         to_mixed_precision)

__all__ = ["PassContext", "PassInfo", "optimize", "run_passes", "graph_pass", "register_pass", "get_pass",
           "list_passes"]

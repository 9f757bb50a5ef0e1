"""Graph passes: Graph -> Graph transforms run under a PassContext (TVM's relay.transform)."""

from tvmc.passes.pass_infra import (PassContext, PassInfo, get_pass, graph_pass, list_passes, optimize,
                                    register_pass, run_passes)
from tvmc.passes import simplify_inference, fold_constant, fuse_ops, plan_memory  # noqa: F401  (registration)

__all__ = ["PassContext", "PassInfo", "optimize", "run_passes", "graph_pass", "register_pass", "get_pass",
           "list_passes"]

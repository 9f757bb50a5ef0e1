"""ONNX frontend: an ONNX model (file or ModelProto) -> graph IR, checked and statically shaped.

`from_onnx` (importer.py) loads and checks the model and converts its nodes through the converter
table (registry.py); the converters live in one module per operator group, named after the ONNX
op types they convert: elementwise, nn, reduce, tensor, quantization, recurrent, control_flow,
dynamic (data-dependent shapes), spectral (DFT, STFT), microsoft and microsoft_nn (onnxruntime's
com.microsoft quantized operators); operators with an ONNX function body and no converter import
as that body (functions.py).
"""

from tvmc.frontend.onnx import (control_flow, dynamic, elementwise, microsoft, microsoft_nn,  # noqa: F401
                                nn, quantization, recurrent, reduce, spectral, tensor)  # (the converters)
from tvmc.frontend.onnx.common import SUPPORTED_DTYPES
from tvmc.frontend.onnx.importer import from_onnx
from tvmc.frontend.onnx.registry import CONVERTERS, supports

__all__ = ["CONVERTERS", "SUPPORTED_DTYPES", "from_onnx", "supports"]

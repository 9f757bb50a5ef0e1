"""Operators: math (tensor-expression computes), type rules and strategies, one module per op group.

Operator catalog (the names and attributes the frontend emits; layouts are NCHW / OIHW):

| op | inputs | attrs | pattern |
| --- | --- | --- | --- |
| nn.conv2d | data[N,C,H,W], weight[O,C/groups,KH,KW] | strides (sh,sw), padding (top,left,bottom,right), dilation (dh,dw), groups | OUT_ELEMWISE_FUSABLE |
| nn.dense | data[M,K], weight[N,K] | - | OUT_ELEMWISE_FUSABLE |
| nn.matmul | a[...,M,K], b[...,K,N] (numpy matmul broadcasting, rank >= 2) | - | OUT_ELEMWISE_FUSABLE |
| nn.matmul_tn | a_t[...,K,Ma], b[...,K,N] -> [...,M,N] (a given transposed; AlterOpLayout's grouped 1x1 convs) | rows M (<= Ma), columns (register-tiled, the rest GEMVs), padded_rows | OUT_ELEMWISE_FUSABLE |
| nn.max_pool2d / nn.avg_pool2d | data[N,C,H,W] | pool_size (kh,kw), strides, padding (t,l,b,r), dilation, ceil_mode (0/1); avg: count_include_pad (0/1); layout (optional: NCHW, or NCHW[x]c with data[N,C/x,H,W,x]) | OUT_ELEMWISE_FUSABLE |
| nn.global_avg_pool2d / nn.global_max_pool2d | data[N,C,H,W] -> [N,C,1,1] (NCHW[x]c: [N,C/x,1,1,x]) | layout (optional, as above) | OUT_ELEMWISE_FUSABLE |
| nn.lrn | data[N,C,H,W] | size, alpha, beta, bias (ONNX LRN semantics, across channels) | OPAQUE |
| nn.softmax | data | axis (normalized, >= 0) | OPAQUE |
| nn.batch_norm | data[N,C,...], gamma[C], beta[C], mean[C], var[C] | epsilon, axis | BROADCAST (removed by SimplifyInference) |
| nn.dropout, identity | x | - | ELEMWISE (removed by SimplifyInference) |
| nn.relu, sigmoid, tanh, exp, sqrt, negative, abs | x | - | ELEMWISE |
| nn.leaky_relu | x | alpha | ELEMWISE |
| clip | x | a_min, a_max (floats) | ELEMWISE |
| add, subtract, multiply, divide, maximum, minimum | a, b (numpy broadcasting) | - | BROADCAST |
| cast | x | dtype | ELEMWISE |
| reshape | x | newshape (fully static, no -1/0) | INJECTIVE |
| transpose | x | axes | INJECTIVE |
| concatenate | x0, x1, ... | axis (>= 0) | INJECTIVE |
| pad | x | pad_width ((before, after) per axis), pad_value | INJECTIVE |
| nn.conv2d_transpose | data[N,C,H,W], weight[C,O/groups,KH,KW] | strides, padding (t,l,b,r; may be negative), dilation, output_padding (oh,ow), groups | OUT_ELEMWISE_FUSABLE |
| nn.conv3d_transpose | data[N,C,D,H,W], weight[C,O/groups,KD,KH,KW] | strides, padding (d,h,w begins, then ends; may be negative), dilation, output_padding, groups | OUT_ELEMWISE_FUSABLE |
| nn.max_pool2d_indices | data[N,C,H,W] -> int64 [N,C,OH,OW], the flat index of each window's first maximum | as nn.max_pool2d (NCHW only), storage_order (0 row-major, 1 column-major) | OPAQUE |
| nn.col2im | data[N,C*prod(B),L] -> [N,C,*image_shape] | image_shape, block_shape B, strides, dilation, padding (begins, then ends) | OUT_ELEMWISE_FUSABLE |
| image.resize2d | data[N,C,H,W], idx_h[OH,Th], idx_w[OW,Tw] (int64), optional w_h[OH,Th], w_w[OW,Tw] (tables from image.resize_tables) | - | INJECTIVE |
| topk_values / topk_indices | x | axis, k, largest (0/1); sorted, ties by lower index; indices int64 | OPAQUE |
| det | x[..., N, N] (float) -> [...] | - (LU with partial pivoting) | OPAQUE |
| nonzero / nonzero_shape | x -> int64[rank, <=size(x)] / int64[2] | - | OPAQUE |
| compress / compress_shape | x, condition bool[L] -> x with axis <= min(extent, L) / int64[rank] | axis | OPAQUE |
| unique / unique_shape, unique_inverse | x -> values (axis <= extent), indices, counts (int64[<=extent]) / int64[rank]; inverse int64[extent] | axis, sorted (0/1), output ('values', 'indices', 'counts', 'inverse') | OPAQUE |
| qnn.conv2d | data[N,C,H,W], weight[O,C/groups,KH,KW] (int8/uint8), input_zero_point int32[], kernel_zero_point int32[] or [O] -> int32 | as nn.conv2d | OUT_ELEMWISE_FUSABLE |
| qnn.dense | data[M,K], weight[N,K] (int8/uint8), input_zero_point int32[], kernel_zero_point int32[] or [N] -> int32 [M,N] | - | OUT_ELEMWISE_FUSABLE |
| qnn.matmul | a[...,M,K], b[...,K,N] (int8/uint8; nn.matmul's broadcasting), a_zero_point int32[] or [M], b_zero_point int32[] or [N] -> int32 | - | OUT_ELEMWISE_FUSABLE |
| qnn.requantize | x int32, scale float16/32/64 [] or [x.shape[axis]] (layout NCHW[x]c: [C], channel i[1]*x + i[4]), output_zero_point int32[] -> out_dtype (round half to even, saturated; tvmc/ops/qnn.py) | out_dtype (int8/uint8), axis, compute_dtype (float64: ONNX reference; float32: onnxruntime), layout (NCHW, or NCHW[x]c for a blocked x and a per-channel scale) | BROADCAST |
| qnn.conv2d_nchwc_u8s8 | data uint8 [N,C/ib,H,W,ib], weight int8 [O/16,C/ib,KH,KW,ceil(ib/4),16,4] -> int32 [N,O/16,OH,OW,16] (the raw u8 x s8 product, no zero points; CPU dot-product kernels, GPU dp4a / OpenCL packed-dot kernels) | strides, padding, dilation, pad_value (uint8), pairs_in_int16, data_pairs, out_layout (NCHW16c) | OUT_ELEMWISE_FUSABLE |
| qnn.conv2d_nchw_u8s8 | data uint8 [N,C,HP,WP] (padded in the graph), weight int8 [O/16,C,KH,ceil(KW/4),16,4] -> int32 [N,O/16,OH,OW,16] (an image stem's raw u8 x s8 product, each dot-product step 4 adjacent taps of a kernel row; CPU only) | strides, out_width, pairs_in_int16, out_layout (NCHW16c) | OUT_ELEMWISE_FUSABLE |
| qnn.conv2d_nchwc_u8s8_mmla | data uint8 [N,C/ib,H,W,ib] (ib a multiple of 8), weight int8 [O/16,C/ib,KH,KW,ib/8,8,2,8] -> int32 [N,O/16,OH,OW,16] (qnn.conv2d_nchwc_u8s8's product in steps of the int8 matrix multiply-accumulate, AArch64 +i8mm USMMLA; CPU) | strides, padding, dilation, pad_value (uint8), out_layout (NCHW16c) | OUT_ELEMWISE_FUSABLE |
| qnn.dense_u8s8_mmla | data uint8 [M,K], weight int8 [N/16,K/8,8,2,8] -> int32 [M,units] (qnn.dense_u8s8's product in steps of the int8 matrix multiply-accumulate, AArch64 +i8mm USMMLA; CPU) | units | OUT_ELEMWISE_FUSABLE |
| qnn.dequantize_blockwise | b uint8 [N,blocks,block_size*bits/8] (n-bit codes packed low bits first), scales float [N,blocks], optional zero points (uint8 packed [N,ceil(blocks*bits/8)] or float [N,blocks]), optional g_idx int32 [K] -> float [N,K] (never folded: the packed weight stays in mod.params) | k, bits (2/4/8), block_size, zero_points (absent/packed/float), g_idx (0/1) | INJECTIVE |
| qnn.unpack_bits | x uint8 [..., bytes] -> uint8 [..., count]: the n-bit codes, low bits first (never folded) | bits (2/4/8), count | INJECTIVE |
| control.loop | M int64[], cond bool[], initial carried..., captured... -> final carried value `index` | body (LoopBody: a graph of its own), index | OPAQUE, no kernel: interpreted by the executors (tvmc/ops/control.py) |

Channel-blocked operators that only AlterOpLayout emits (CPU targets, opt level 3):

| op | inputs | attrs | pattern |
| --- | --- | --- | --- |
| layout_transform | x in src_layout | src_layout, dst_layout: NCHW or NCHW[x]c ([N,C/x,H,W,x]) | INJECTIVE |
| nn.conv2d_nchwc | data[N,C/ib,H,W,ib], weight[O/ob,C/ib,KH,KW,ib,ob] (depthwise: [C/ob,1,KH,KW,1,ob]) -> [N,O/ob,OH,OW,ob] | strides, padding, dilation, groups (1 or C), out_layout (NCHW[ob]c) | OUT_ELEMWISE_FUSABLE |
| nn.conv2d_winograd_nchwc | data[N,C/ib,H,W,ib], weight U[(m+2)^2,O/ob,C/ib,ib,ob] (transformed at compile time) -> [N,O/ob,OH,OW,ob] | padding, tile_size m (2 or 4), out_layout (NCHW[ob]c); 3x3, stride 1, dilation 1, groups 1 | OUT_ELEMWISE_FUSABLE |
"""

# each op module registers its operators on import
from tvmc.ops import (elemwise, layout, nn_conv2d, nn_conv2d_nchwc, nn_dense, nn_misc, nn_pool,  # noqa: F401
                      transform)
from tvmc.ops import reduce  # noqa: F401,E402  (registration: reductions, argmax/argmin, cumsum)
from tvmc.ops import image  # noqa: F401,E402  (registration: image.resize2d)
from tvmc.ops import nn_conv2d_transpose  # noqa: F401,E402  (registration: nn.conv2d_transpose)
from tvmc.ops import sort  # noqa: F401,E402  (registration: topk_values, topk_indices)
from tvmc.ops import scatter  # noqa: F401,E402  (registration: scatter_elements, scatter_nd)
from tvmc.ops import nn_col2im  # noqa: F401,E402  (registration: nn.col2im)
from tvmc.ops import linalg  # noqa: F401,E402  (registration: det)
from tvmc.ops import dynamic  # noqa: F401,E402  (registration: nonzero, compress, unique and their _shape ops)
from tvmc.ops import control  # noqa: F401,E402  (registration: control.loop, interpreted by the executors)
from tvmc.ops import nn_conv2d_winograd  # noqa: F401,E402  (registration: nn.conv2d_winograd_nchwc)
from tvmc.ops import qnn  # noqa: F401,E402  (registration: qnn.conv2d, qnn.dense, qnn.matmul, qnn.requantize)
from tvmc.ops import qnn_blockwise  # noqa: F401,E402  (registration: qnn.dequantize_blockwise, qnn.unpack_bits)

"""Operators: math (tensor-expression computes), type rules and strategies, one module per op group.

Operator catalog (the names and attributes the frontend emits; layouts are NCHW / OIHW):

| op | inputs | attrs | pattern |
| --- | --- | --- | --- |
| nn.conv2d | data[N,C,H,W], weight[O,C/groups,KH,KW] | strides (sh,sw), padding (top,left,bottom,right), dilation (dh,dw), groups | OUT_ELEMWISE_FUSABLE |
| nn.dense | data[M,K], weight[N,K] | - | OUT_ELEMWISE_FUSABLE |
| nn.matmul | a[...,M,K], b[...,K,N] (numpy matmul broadcasting, rank >= 2) | - | OUT_ELEMWISE_FUSABLE |
| nn.max_pool2d / nn.avg_pool2d | data[N,C,H,W] | pool_size (kh,kw), strides, padding (t,l,b,r), dilation, ceil_mode (0/1); avg: count_include_pad (0/1) | OUT_ELEMWISE_FUSABLE |
| nn.global_avg_pool2d / nn.global_max_pool2d | data[N,C,H,W] -> [N,C,1,1] | - | OUT_ELEMWISE_FUSABLE |
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
"""

from tvmc.ops import elemwise, nn_conv2d, nn_dense, nn_pool, nn_misc, transform  # noqa: F401  (registration)

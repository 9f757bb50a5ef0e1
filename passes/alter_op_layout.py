"""Graph pass AlterOpLayout: NCHW -> NCHW[x]c (channel-blocked) convolutions and their neighbours on CPUs."""

from __future__ import annotations

import numpy as np

from tvmc.graph import symbolic
from tvmc.graph.ir import Call, Constant, Expr, Graph, rewrite
from tvmc.ops.layout import blocked_layout, channel_block, to_layout
from tvmc.ops.cpu.conv2d_winograd import WINOGRAD_IMPL_TILES, plan_winograd, winograd_eligible
from tvmc.ops.cpu.dense import matmul_padding, matmul_tail_columns, padded_rows
from tvmc.ops.cpu.int8 import (
    BLOCK_K,
    BLOCK_N,
    DATA_DTYPES,
    pack_conv2d_u8s8_row_weight,
    pack_conv2d_u8s8_weight,
    pack_dense_u8s8_weight,
    pairs_in_int16,
)
from tvmc.ops.cpu.int8_mmla import MMLA_K, pack_conv2d_u8s8_mmla_weight, pack_dense_u8s8_mmla_weight
from tvmc.ops.nn_conv2d_nchwc import pack_weight
from tvmc.ops.nn_conv2d_winograd import winograd_weight_transform
from tvmc.ops.nn_dense import MAX_LANES, pack_dense_weight
from tvmc.ops.registry import OpPattern, get_op, make_call
from tvmc.passes.pass_infra import graph_pass

NCHW = "NCHW"
FLOAT32_EXACT_INT = 2 ** 24  # float32 holds every integer of magnitude below this (24-bit significand)
_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")
_DTYPES = ("float32", "float64")
ROW_ALIGN = 16  # qnn_conv2d_rows pads a stem's rows to a multiple of this many bytes (float32 vector lanes)
# quantize / dequantize / rescale / add: tensors (add: two) and the scales, shifts and zero points that
# broadcast against them (per channel: [C, 1, 1])
_RESCALES = ("qnn.quantize", "qnn.dequantize", "qnn.rescale", "qnn.add")
# op -> the _Rewriter rule (method) that rewrites it; elementwise and broadcast ops follow their
# operands' layout (_Rewriter.unary, .binary); GPU targets take the int8 rules alone
_QNN_RULES = {"qnn.dense": "qnn_dense", "qnn.conv2d": "qnn_conv2d", "qnn.requantize": "qnn_requantize"}
_RULES = {"nn.conv2d": "conv2d", "nn.dense": "dense", "nn.matmul": "matmul", **_QNN_RULES,
          **{pool: "pool" for pool in _POOLS}, "concatenate": "concatenate", "reshape": "channel_shuffle"}


def channel_block_for(channels: int, max_block: int) -> int:
    """The largest power of two <= `max_block` (the target's vector lanes) dividing `channels`."""
    b = 1
    while b * 2 <= max_block and channels % (b * 2) == 0:
        b *= 2
    return b


def pad_channels(value: np.ndarray, channels: int, padded: int) -> np.ndarray:
    """numpy: `value`, broadcasting against [N, channels, H, W] (rank <= 4), zero-padded along its
    channel axis to `padded` channels where that axis is `channels` (a bias [C, 1, 1] ->
    [padded, 1, 1]); unchanged where it is 1 or `value` has no channel axis."""
    if value.ndim < 3 or value.shape[-3] != channels:
        return value
    width = [(0, 0)] * value.ndim
    width[-3] = (0, padded - channels)
    return np.pad(value, width)


def blocked_constant(value: np.ndarray, channels: int, block: int) -> np.ndarray:
    """numpy: a constant operand of a broadcast op whose other operand becomes NCHW[block]c.

    `value` broadcasts against [N, channels, H, W] (rank <= 4, its channel axis 1 or `channels`);
    the result broadcasts the same way against [N, channels//block, H, W, block]: e.g. a bias
    [C, 1, 1] becomes [C//block, 1, 1, block], a [1, 1, H, W] map becomes [1, 1, H, W, 1].
    Leading axes that `value` did not have are dropped again (numpy broadcasting adds them).
    Raises ValueError for rank > 4 or a channel axis that is neither 1 nor `channels`.
    """
    rank = value.ndim
    if rank > 4:
        raise ValueError(f"cannot block a rank-{rank} operand")
    full = value.reshape((1,) * (4 - rank) + value.shape)
    n, c, h, w = full.shape
    if c == 1:
        out = full.reshape(n, 1, h, w, 1)
    elif c == channels:
        out = to_layout(np.broadcast_to(full, (n, c, h, w)), NCHW, blocked_layout(block))
    else:
        raise ValueError(f"channel axis {c} of operand {list(value.shape)} does not broadcast to {channels}")
    return np.ascontiguousarray(out.reshape(out.shape[4 - rank:] if rank else ()))


def data_shift(dtype: str, want: str) -> int:
    """What the int8 kernels' data operand adds to data of `dtype` to hold it as `want`: int8 as
    uint8 +128, uint8 as int8 -128, else 0 (the zero-point term subtracts (shift + x_zp) sum w)."""
    if dtype == want:
        return 0
    return 128 if want == "uint8" else -128


class _Rewriter:
    """One post-order walk: each old expression maps to (new expression, its layout).

    A layout is "NCHW" (the tensor is stored exactly as before the pass, whatever its rank) or
    "NCHW[x]c" (a 4-D NCHW tensor now stored blocked). Conversions are memoized per (tensor,
    layout), so a tensor that several consumers need in one layout is transformed once.
    """

    def __init__(self, target, min_block: int, winograd: dict, grouped: bool = True, pad_channels: int = 0,
                 qnn_only: bool = False, float_narrow_int8: int = -1, int8_saturate: bool = False,
                 winograd_at_load: bool = True):
        self.target = target
        self.winograd_at_load = winograd_at_load  # option winograd_at_load: U computed when the artifact loads
        self.int8_saturate = int8_saturate  # option int8_saturate: vpmaddubsw pairs saturate (MLAS)
        # option float_narrow_int8 (qnn_conv2d_float): 1 on, 0 off, -1 the target's narrow_int8_conv
        self.float_narrow_int8 = (target.narrow_int8_conv == "float" if float_narrow_int8 < 0 and target is not None
                                  else bool(float_narrow_int8))
        self.qnn_only = qnn_only    # GPU targets: the int8 rewrites and the layout flow of their outputs only
        # the int8 matrix multiply-accumulate kernels (int8_mmla) on CPU targets that have one (+i8mm)
        self.mmla = not qnn_only and target is not None and target.mmla_u8s8 is not None
        self.pad_channels = pad_channels  # option pad_channels: pad O when the padding is <= O / this (0: never)
        self.winograd = winograd    # nn.conv2d Call -> Winograd tile (plan_winograd)
        self.grouped = grouped
        self.max_block = target.vector_lanes("float32")
        self.min_block = min(min_block, self.max_block)
        self.memo: dict = {}        # old Expr -> (new Expr, layout)
        self.converted: dict = {}   # (new Expr, layout) -> new Expr in that layout
        self.padded: dict = {}      # new blocked Expr -> its logical channel count (fewer: padded_conv2d)
        self.conv_blocks: dict = {}  # groups-1 nn.conv2d Call -> (blocked data, ic_bn, oc_bn) it was given

    # --- conversions ------------------------------------------------------------------------
    def plain(self, old: Expr) -> Expr:
        """`old`'s replacement in its original layout."""
        return self.as_layout(old, NCHW)

    def as_layout(self, old: Expr, layout: str) -> Expr:
        """`old`'s replacement stored as `layout` (a constant is converted here, at compile time;
        anything else through a layout_transform)."""
        new, cur = self.memo[old]
        if cur == layout and new not in self.padded:
            return new
        key = (new, layout)
        if key not in self.converted:
            if new in self.padded:
                # back to NCHW, then the logical channels only (strided_slice), then `layout`
                plain = make_call("layout_transform", [new], {"src_layout": cur, "dst_layout": NCHW},
                                  name=f"{getattr(old, 'name', '') or 'tensor'}_{NCHW}")
                n, _, h, w = old.shape
                sliced = make_call("strided_slice", [plain], {"begin": (0, 0, 0, 0), "end": (n, self.padded[new], h, w),
                                                              "strides": (1, 1, 1, 1)},
                                   name=f"{getattr(old, 'name', '') or 'tensor'}_channels")
                self.converted[key] = sliced if layout == NCHW else make_call(
                    "layout_transform", [sliced], {"src_layout": NCHW, "dst_layout": layout},
                    name=f"{getattr(old, 'name', '') or 'tensor'}_{layout}")
            elif isinstance(new, Constant) and cur == NCHW:
                value = to_layout(new.value, NCHW, layout)
                self.converted[key] = Constant(value, f"{new.name or 'const'}_{layout}")
            else:
                self.converted[key] = make_call("layout_transform", [new], {"src_layout": cur, "dst_layout": layout},
                                                name=f"{getattr(old, 'name', '') or 'tensor'}_{layout}")
        return self.converted[key]

    def pairs_in_int16(self, packed: np.ndarray) -> bool:
        """The u8s8 kernels' pairs_in_int16 for packed int8 weights: tvmc.ops.cpu.int8.pairs_in_int16
        (exact), or True under option int8_saturate."""
        return self.int8_saturate or pairs_in_int16(packed)

    def data_pairs(self, pairs_in_int16: bool, rows) -> bool:
        """The u8s8 kernels' data_pairs (tvmc.ops.cpu.int8: the uint8 data widened to int16 pairs
        once): on CPU targets whose dot-product form takes it (Target.dot_data_pairs: x86
        vpmaddubsw), for exact kernels (not pairs_in_int16), whose register tile shares a weight
        block among several data rows (`rows`: a dense's M, a conv's OW; a static 1 keeps the
        split form on uint8 data, which needs no int16 copy)."""
        return not self.qnn_only and self.target is not None and self.target.dot_data_pairs and \
            not pairs_in_int16 and rows != 1

    def block_of(self, channels: int) -> int:
        return channel_block_for(channels, self.max_block)

    def layout_of(self, old: Expr) -> str:
        return self.memo[old][1]

    def data_block(self, old: Expr) -> int | None:
        """The channel block that `old`'s replacement has for a consumer that reads its logical
        channels: its layout's block, but for a tensor with padded channels (padded_conv2d),
        which goes back through NCHW (as_layout), the largest block dividing its channels."""
        new, layout = self.memo[old]
        if new in self.padded:
            return self.block_of(old.shape[1])
        return channel_block(layout)

    # --- rules ---------------------------------------------------------------------------------
    def visit(self, e: Expr):
        if not isinstance(e, Call):
            self.memo[e] = (e, NCHW)
            return
        out = None
        if isinstance(e.op, str):
            rule = (_QNN_RULES if self.qnn_only else _RULES).get(e.op)
            if rule is not None:
                out = getattr(self, rule)(e)
            else:
                pattern = get_op(e.op).pattern
                if pattern == OpPattern.ELEMWISE and len(e.inputs) == 1:
                    out = self.unary(e)
                elif pattern == OpPattern.BROADCAST and (len(e.inputs) == 2 or e.op in _RESCALES):
                    out = self.binary(e)
        if out is None:
            inputs = [self.plain(i) for i in e.inputs]
            same = all(a is b for a, b in zip(inputs, e.inputs))
            out = (e if same else Call(e.op, inputs, e.attrs, e.type, e.name), NCHW)
        self.memo[e] = out

    def conv2d(self, e: Call):
        data, weight = e.inputs
        groups = e.attrs.get("groups", 1)
        if len(data.shape) != 4 or not isinstance(weight, Constant) or e.dtype not in _DTYPES:
            return None
        c, o = data.shape[1], e.shape[1]
        depthwise = groups > 1 and groups == c == o and weight.shape[1] == 1
        if groups != 1 and not depthwise:
            return self.group_conv2d(e) if self.grouped else None
        oc_bn = self.block_of(o)
        if self.pad_channels and not depthwise and oc_bn < self.max_block and e not in self.winograd:
            # an even number of blocks where the bound allows: the x86 fallback tiles two blocks
            for step in (2 * self.max_block, self.max_block):
                padded = -(-o // step) * step
                if (padded - o) * self.pad_channels <= o:
                    return self.padded_conv2d(e, padded)
        if oc_bn < self.min_block:
            return None
        if depthwise:
            ic_bn = oc_bn
        else:
            ic_bn = self.data_block(data) or self.block_of(c)
        x = self.as_layout(data, blocked_layout(ic_bn))
        if not depthwise:
            self.conv_blocks[e] = (x, ic_bn, oc_bn)
        return self.conv_form(e, x, ic_bn, oc_bn, self.winograd.get(e, 0), weight.value), blocked_layout(oc_bn)

    def conv_form(self, e: Call, x: Expr, ic_bn: int, oc_bn: int, m: int, weight: np.ndarray) -> Call:
        """nn.conv2d `e` on blocked data `x` as nn.conv2d_winograd_nchwc with output tile `m`, or
        (m = 0) as nn.conv2d_nchwc, its OIHW `weight` packed here; the Winograd weight transformed
        at load time from the packed one (nn.winograd_weight_transform) or, without
        winograd_at_load, here."""
        name = e.inputs[1].name or "weight"
        if m and self.winograd_at_load:
            packed = Constant(pack_weight(weight, ic_bn, oc_bn), f"{name}_OIHW{ic_bn}i{oc_bn}o")
            w = make_call("nn.winograd_weight_transform", [packed], {"tile_size": m},
                          name=f"{name}_winograd{m}_{ic_bn}i{oc_bn}o")
        elif m:
            w = Constant(winograd_weight_transform(weight, m, ic_bn, oc_bn), f"{name}_winograd{m}_{ic_bn}i{oc_bn}o")
        if m:
            attrs = {"padding": e.attrs["padding"], "tile_size": m, "out_layout": blocked_layout(oc_bn)}
            return make_call("nn.conv2d_winograd_nchwc", [x, w], attrs, name=e.name)
        groups = e.attrs.get("groups", 1)
        depthwise = groups > 1
        w = Constant(pack_weight(weight, ic_bn, oc_bn, depthwise), f"{name}_OIHW{1 if depthwise else ic_bn}i{oc_bn}o")
        return make_call("nn.conv2d_nchwc", [x, w], dict(e.attrs, groups=groups, out_layout=blocked_layout(oc_bn)),
                         name=e.name)

    def padded_conv2d(self, e: Call, padded: int):
        """A groups-1 nn.conv2d whose O no full vector block divides (a classifier's 1000 classes:
        blocks of 8, half of an AVX-512 register idle) computes `padded` (O rounded up to a
        multiple of the vector lanes) output channels with zero weights in the extra ones, as nn.conv2d_nchwc
        producing NCHW[lanes]c with the padded channels (self.padded). Elementwise ops, pooling and
        broadcasts against Constants (zero-padded to `padded` channels) keep them; any other use
        goes back to NCHW and keeps the first O channels (as_layout: layout_transform +
        strided_slice)."""
        data, weight = e.inputs
        o, lanes = e.shape[1], self.max_block
        ic_bn = self.data_block(data) or self.block_of(data.shape[1])
        x = self.as_layout(data, blocked_layout(ic_bn))
        value = np.concatenate([weight.value, np.zeros((padded - o,) + weight.value.shape[1:], weight.value.dtype)])
        w = Constant(pack_weight(value, ic_bn, lanes, False),
                     f"{weight.name or 'weight'}_OIHW{ic_bn}i{lanes}o_pad{padded}")
        conv = make_call("nn.conv2d_nchwc", [x, w], dict(e.attrs, groups=1, out_layout=blocked_layout(lanes)),
                         name=e.name)
        self.padded[conv] = o
        return conv, blocked_layout(lanes)

    def group_conv2d(self, e: Call):
        """A grouped, not depthwise, nn.conv2d (C/g input and O/g output channels per group) ->
        nn.conv2d_nchwc with groups (TVM's group_conv2d_NCHWc): oc_bn the largest power of two <=
        the lanes dividing O/g (the conv stays NCHW when that is below the minimum block), ic_bn
        the data's block where it divides C/g, else the same rule on C/g; the weight [O, C/g, KH,
        KW] packed to [O//oc_bn, (C/g)//ic_bn, KH, KW, ic_bn, oc_bn]."""
        data, weight = e.inputs
        groups = e.attrs["groups"]
        c, o = data.shape[1], e.shape[1]
        if c % groups or o % groups:
            return None
        oc_bn = self.block_of(o // groups)
        if oc_bn < self.min_block:
            return self.group_conv2d_as_matmul(e)
        ic_bn = self.data_block(data)
        if ic_bn is None or (c // groups) % ic_bn:
            ic_bn = self.block_of(c // groups)
        x = self.as_layout(data, blocked_layout(ic_bn))
        w = Constant(pack_weight(weight.value, ic_bn, oc_bn), f"{weight.name or 'weight'}_OIHW{ic_bn}i{oc_bn}o")
        attrs = dict(e.attrs, out_layout=blocked_layout(oc_bn))
        return make_call("nn.conv2d_nchwc", [x, w], attrs, name=e.name), blocked_layout(oc_bn)

    def group_conv2d_as_matmul(self, e: Call):
        """A grouped 1x1 stride-1 unpadded float32 nn.conv2d that no block of at least the minimum
        fits (ShuffleNet's g = 4 convs over 136 and 272 channels: 34 and 68 per group) as g GEMMs
        over the flattened image: reshape(x, [N, g, C/g, H*W]), nn.matmul of the weight [g, O/g, C/g]
        with it (padded as tvmc.ops.cpu.dense.matmul_padding says), reshape to [N, O, H, W], all in
        NCHW. The generic NCHW kernel vectorizes along W alone and computes each output channel's
        group; the GEMM's vectors run along H*W with one group per register tile. Measured on
        ShuffleNet's 136-channel 28x28 conv (AVX-512, one thread): 206 us as the NCHW conv, 61 us as
        the GEMM plus 19 us for the input's reshape (a copy: the flat index simplifies to a ramp,
        tvmc.tir.simplify.merge_divmod). Where the vector lanes leave a short tail of H*W
        (tvmc.ops.cpu.dense.matmul_tail_columns: 7 x 7 = 48 + 1 on AVX-512), nn.matmul_tn instead,
        of the weight transposed to [g, C/g, O/g] with O/g padded with zeros to whole vectors
        (MAX_LANES): register tiles over the whole vectors, the tail columns as GEMVs along O/g
        (ShuffleNet's 272-channel conv at 7 x 7, AVX-512, one thread: 22.2 -> 16.9 us, 82 -> 107
        GFLOP/s; its 136-channel one at 14 x 14: 20.4 -> 18.6 us). None (the conv stays NCHW) for
        any other conv."""
        data, weight = e.inputs
        groups = e.attrs["groups"]
        n, c, h, w = data.shape
        o = e.shape[1]
        if not (e.dtype == "float32" and weight.shape[2:] == (1, 1) and tuple(e.attrs.get("strides", (1, 1))) == (1, 1)
                and not any(e.attrs.get("padding", (0, 0, 0, 0))) and not data.type.is_symbolic):
            return None
        og, cg = o // groups, c // groups
        x = make_call("reshape", [self.plain(data)], {"newshape": (n, groups, cg, h * w)},
                      name=f"{e.name or 'conv'}_groups")
        columns = matmul_tail_columns(og, h * w, self.target)
        if columns < h * w:
            # transposed, its rows padded with zeros to whole vectors of the tail's GEMVs
            wt = np.zeros((groups, cg, -(-og // MAX_LANES) * MAX_LANES), weight.value.dtype)
            wt[:, :, :og] = weight.value.reshape(groups, og, cg).transpose(0, 2, 1)
            product = make_call("nn.matmul_tn", [Constant(wt, f"{weight.name or 'weight'}_{groups}groups_t"), x],
                                {"rows": og, "columns": columns, "padded_rows": padded_rows(og)}, name=e.name)
        else:
            wg = Constant(weight.value.reshape(groups, og, cg), f"{weight.name or 'weight'}_{groups}groups")
            padded = matmul_padding(og, h * w, self.target)
            product = make_call("nn.matmul", [wg, x], {"padded": list(padded)} if padded else {}, name=e.name)
        return make_call("reshape", [product], {"newshape": (n, o, h, w)}, name=f"{e.name or 'conv'}_nchw"), NCHW

    def channel_shuffle(self, e: Call):
        """ShuffleNet's channel shuffle reshape(transpose(reshape(x, [N, g, C/g, H, W]),
        (0, 2, 1, 3, 4)), [N, C, H, W]) of a blocked x -> channel_shuffle(x, g) in x's layout (any
        block: each output element is gathered from its source channel); the inner reshape and
        transpose, when nothing else uses them, disappear with the old graph."""
        t = e.inputs[0]
        if not (len(e.shape) == 4 and isinstance(t, Call) and t.op == "transpose"
                and tuple(t.attrs["axes"]) == (0, 2, 1, 3, 4)):
            return None
        r = t.inputs[0]
        if not (isinstance(r, Call) and r.op == "reshape" and len(r.inputs[0].shape) == 4):
            return None
        x = r.inputs[0]
        n, c, h, w = x.shape
        groups = r.shape[1]
        if tuple(e.shape) != tuple(x.shape) or tuple(r.shape) != (n, groups, c // groups, h, w):
            return None
        layout = self.layout_of(x)
        if layout == NCHW or self.memo[x][0] in self.padded:
            return None
        return make_call("channel_shuffle", [self.memo[x][0]], {"groups": groups, "layout": layout},
                         name=e.name), layout

    def dense(self, e: Call):
        data, weight = e.inputs
        if not isinstance(weight, Constant) or e.dtype not in _DTYPES:
            return None
        n = weight.shape[0]
        bn = self.block_of(n)
        attrs = {}
        if bn < self.min_block:
            if n < self.max_block:
                return None
            bn, attrs = self.max_block, {"units": n}  # no block divides N: pad the last one
        w = Constant(pack_dense_weight(weight.value, bn), f"{weight.name or 'weight'}_NK{bn}n")
        return make_call("nn.dense_pack", [self.plain(data), w], attrs, name=e.name), NCHW

    def matmul(self, e: Call):
        """nn.matmul with `padded` (tvmc.ops.cpu.dense.matmul_padding) where its M or N makes a
        ragged register tile on this target; its operands keep their layout. Symbolic M or N: not
        padded (the symbolic matmul schedule tiles for the range and runs a tail)."""
        if e.type.is_symbolic:
            return None
        padded = matmul_padding(e.shape[-2], e.shape[-1], self.target) if e.dtype in _DTYPES else None
        if padded is None:
            return None
        return make_call("nn.matmul", [self.plain(i) for i in e.inputs], dict(e.attrs, padded=list(padded)),
                         name=e.name), NCHW

    def qnn_dense(self, e: Call):
        """qnn.dense with a constant int8 weight and a zero weight zero point (symmetric weights,
        onnxruntime's default for int8) -> qnn.dense_u8s8 of the weight packed here into blocks of
        the dot-product step (tvmc.ops.cpu.int8.pack_dense_u8s8_weight), minus the zero-point term:
        sum_k (x - x_zp) w = sum_k x_u8 w - (shift + x_zp) sum_k w, where int8 data enters as
        x_u8 = x + 128 (shift 128; uint8 data: shift 0) and sum_k w is a constant per column. On
        targets whose dot product takes int8 data (Target.dot_data_dtype: AArch64 SDOT) uint8
        data enters as x - 128 instead (shift -128; int8 data: 0), by the same formula. On targets
        with an int8 matrix multiply-accumulate (Target.mmla_u8s8: AArch64 +i8mm) and more than one
        data row (a static M > 1) it becomes qnn.dense_u8s8_mmla instead (two rows x two columns x
        8 reduction elements per USMMLA; one row would leave half of each step's products unused)."""
        data, weight, x_zp, w_zp = e.inputs
        if not (isinstance(weight, Constant) and weight.dtype == "int8" and isinstance(w_zp, Constant)
                and not w_zp.value.any()):
            return None
        mmla = self.mmla and isinstance(data.shape[0], int) and data.shape[0] > 1
        want = self.kernel_data_dtype(uint8=mmla)
        x, shift = self.plain(data), data_shift(data.dtype, want)
        if shift:
            x = self.shifted(x, shift, want)
        n = weight.shape[0]
        if mmla:
            packed = pack_dense_u8s8_mmla_weight(weight.value)
            product = make_call("qnn.dense_u8s8_mmla", [x, Constant(packed, f"{weight.name or 'weight'}_mmla")],
                                {"units": n}, name=e.name)
        else:
            packed = pack_dense_u8s8_weight(weight.value)
            pairs = self.pairs_in_int16(packed)
            product = make_call("qnn.dense_u8s8", [x, Constant(packed, f"{weight.name or 'weight'}_u8s8")],
                                {"units": n, "pairs_in_int16": pairs,
                                 "data_pairs": self.data_pairs(pairs, data.shape[0])}, name=e.name)
        colsum = weight.value.astype(np.int32).sum(axis=1)
        if isinstance(x_zp, Constant):
            term = (shift + int(x_zp.value)) * colsum
            if not term.any():
                return product, NCHW
            corr = Constant(term.astype(np.int32), f"{weight.name or 'weight'}_zero_point_term")
        else:
            zp = self.plain(x_zp)
            if shift:
                zp = make_call("add", [zp, Constant(np.array(shift, np.int32), "data_shift")])
            corr = make_call("multiply", [zp, Constant(colsum.astype(np.int32), f"{weight.name or 'weight'}_colsum")])
        return make_call("subtract", [product, corr]), NCHW

    def qnn_conv2d(self, e: Call):
        """qnn.conv2d (groups 1) with a constant int8 weight, a zero (symmetric) weight zero point,
        a constant input zero point and O a multiple of 16 -> qnn.conv2d_nchwc_u8s8 (the
        dot-product instructions, tvmc/ops/cpu/int8.py) on NCHW[ib]c uint8 data, producing
        NCHW16c, minus the zero-point term.

        int8 data enters as x_u8 = x + 128 (shift 128; uint8 data: shift 0), and per output
        channel o

            sum (x - x_zp) w = sum x_u8 w - (shift + x_zp) sum_{ic, kh, kw} w[o]

        holds for every output pixel, its window at the border included, because the kernel pads
        x_u8 with pad_value = shift + x_zp (the input zero point in the shifted domain, a value of
        the kernel's data type for either input type): a padded tap holds x_u8 - (shift + x_zp) = 0, as ONNX pads
        the shifted input x - x_zp with zeros, so the constant term is exact everywhere. On targets
        whose dot product takes int8 data (Target.dot_data_dtype: AArch64 SDOT) the data enters as
        int8 instead (uint8 data shifted by -128, int8 data as it is), by the same formula. The term
        is a compile-time constant [O] (blocked to [O/16, 1, 1, 16]), subtracted in the epilogue.
        On targets with an int8 matrix multiply-accumulate (Target.mmla_u8s8: AArch64 +i8mm) and
        C a multiple of 8 it becomes qnn.conv2d_nchwc_u8s8_mmla instead (the same product, two
        output pixels x two output channels x 8 input channels per USMMLA), on a data block that
        is a multiple of 8 (the data's, else 16 or 8); static shapes only (a symbolic one keeps
        the dot-product kernel).
        ib: the data's block where it is a multiple of 4, else the largest of 16, 8, 4 dividing C,
        else C (one block, padded to a multiple of 4 in the kernel: a 3-channel image on a GPU,
        or dilated). On CPU targets a conv of C % 4 != 0 and dilation 1 takes instead the float
        conv (qnn_conv2d_float) or the row kernel (qnn_conv2d_rows), as option float_narrow_int8
        or the target's dot-product form says (Target.narrow_int8_conv)."""
        data, weight, x_zp, w_zp = e.inputs
        if not (e.attrs.get("groups", 1) == 1 and len(data.shape) == 4 and isinstance(weight, Constant)
                and weight.dtype == "int8" and isinstance(w_zp, Constant) and not w_zp.value.any()
                and isinstance(x_zp, Constant) and e.shape[1] % BLOCK_N == 0):
            return None
        c = data.shape[1]
        static = not symbolic.free_vars([*data.shape, *e.shape])
        rows = bool(c % BLOCK_K) and not self.qnn_only and tuple(e.attrs["dilation"]) == (1, 1) and static
        mmla = self.mmla and c % MMLA_K == 0 and static
        want = self.kernel_data_dtype(uint8=rows or mmla)  # the row and mmla kernels take uint8 data
        shift = data_shift(data.dtype, want)
        pad_value = shift + int(x_zp.value)
        lo, hi = DATA_DTYPES[want]
        if not lo <= pad_value <= hi:
            return None
        if c % BLOCK_K and self.float_narrow_int8 and not self.qnn_only:
            out = self.qnn_conv2d_float(e)
            if out is not None:
                return out
        name = weight.name or "weight"
        if rows:
            product = self.qnn_conv2d_rows(e, shift, pad_value, name)
        else:
            ib = self.data_block(data)
            if mmla and (ib is None or ib % MMLA_K):
                ib = next(b for b in (16, 8) if c % b == 0)
            if ib is None or ib % BLOCK_K:
                ib = next((b for b in (16, 8, 4) if c % b == 0), c)
            x = self.as_layout(data, blocked_layout(ib))
            if shift:
                x = self.shifted(x, shift, want)
            attrs = {k: e.attrs[k] for k in ("strides", "padding", "dilation")}
            attrs.update(pad_value=pad_value, out_layout=blocked_layout(BLOCK_N))
            if mmla:
                packed = pack_conv2d_u8s8_mmla_weight(weight.value, ib)
                product = make_call("qnn.conv2d_nchwc_u8s8_mmla", [x, Constant(packed, f"{name}_OIHW{ib}i16o_mmla")],
                                    attrs, name=e.name)
            else:
                packed = pack_conv2d_u8s8_weight(weight.value, ib)
                attrs["pairs_in_int16"] = self.pairs_in_int16(packed)
                # a strided conv without padding reads part of its input: no int16 copy of all of it
                # (resnet_style_cnn's 1x1 stride-2 shortcut on x86-avx2: 5.8 -> 6.0 us with one)
                attrs["data_pairs"] = self.data_pairs(attrs["pairs_in_int16"], e.shape[3]) and (
                    tuple(e.attrs["strides"]) == (1, 1) or any(e.attrs["padding"]))
                product = make_call("qnn.conv2d_nchwc_u8s8", [x, Constant(packed, f"{name}_OIHW{ib}i16o_u8s8")],
                                    attrs, name=e.name)
        term = pad_value * weight.value.astype(np.int32).sum(axis=(1, 2, 3))
        out_layout = blocked_layout(BLOCK_N)
        if not term.any():
            return product, out_layout
        corr = Constant(blocked_constant(term.astype(np.int32).reshape(-1, 1, 1), e.shape[1], BLOCK_N),
                        f"{name}_zero_point_term")
        return make_call("subtract", [product, corr]), out_layout

    def kernel_data_dtype(self, uint8: bool = False) -> str:
        """The data type the int8 kernels take on this target: Target.dot_data_dtype (int8 where
        the dot product is s8 x s8: AArch64 SDOT), uint8 on GPUs, without a target, or where
        `uint8` (the row kernel and the matrix multiply-accumulate kernel take uint8 only)."""
        if uint8 or self.qnn_only or self.target is None:
            return "uint8"
        return self.target.dot_data_dtype

    @staticmethod
    def shifted(x: Expr, shift: int, dtype: str) -> Expr:
        """`x` + shift as `dtype`: int8 data as uint8 x + 128, uint8 data as int8 x - 128."""
        widened = make_call("cast", [x], {"dtype": "int32"})
        return make_call("cast", [make_call("add", [widened, Constant(np.array(shift, np.int32), "data_shift")])],
                         {"dtype": dtype})

    def qnn_conv2d_rows(self, e: Call, shift: int, pad_value: int, name: str) -> Expr:
        """The u8 x s8 product of a qnn.conv2d (the qnn_conv2d conditions, dilation 1) whose C is
        not a multiple of 4 (an image stem, C = 3): qnn.conv2d_nchw_u8s8, each dot-product step 4
        adjacent taps of one kernel row (tvmc.ops.cpu.int8.conv2d_nchw_u8s8), on the planar uint8
        data padded here by a `pad` op: the conv's borders, and on the right the columns the taps
        past KW read (they meet zero weights), up to a multiple of ROW_ALIGN bytes (whole float32
        vectors for the pad's loops), hold `pad_value`. Static shapes only. The shift
        and the pad are injective: FuseOps fuses them with the kernel that quantizes the input,
        which runs along the planar rows. (The channel quads of conv2d_nchwc_u8s8 would need the
        3 channels interleaved into NCHW4c, a gather of bytes per pixel, for as many steps: 9 per
        output pixel at 3x3 either way, 49 at 7x7 where the rows take 42.)"""
        data, weight = e.inputs[:2]
        x = self.plain(data)
        if shift:
            x = self.shifted(x, shift, "uint8")
        kw = weight.shape[3]
        pt, pl, pb, _ = e.attrs["padding"]  # the right padding: whatever the last quad reads
        ow = e.shape[3]
        # the columns the last quad reads (at least the input's and its left padding), rounded up to
        # whole vectors of ROW_ALIGN for the pad's loops
        need = max((ow - 1) * e.attrs["strides"][1] + -(-kw // BLOCK_K) * BLOCK_K, data.shape[3] + pl)
        wp = -(-need // ROW_ALIGN) * ROW_ALIGN
        right = wp - data.shape[3] - pl
        if pt or pl or pb or right:
            x = make_call("pad", [x], {"pad_width": ((0, 0), (0, 0), (pt, pb), (pl, right)),
                                       "pad_value": pad_value}, name=f"{name}_padded_input")
        packed = pack_conv2d_u8s8_row_weight(weight.value)
        attrs = {"strides": e.attrs["strides"], "out_width": ow, "pairs_in_int16": self.pairs_in_int16(packed),
                 "out_layout": blocked_layout(BLOCK_N)}
        return make_call("qnn.conv2d_nchw_u8s8", [x, Constant(packed, f"{name}_OIHW16o4w_u8s8")], attrs, name=e.name)

    def qnn_conv2d_float(self, e: Call):
        """A qnn.conv2d (groups 1, constant int8 weight, zero weight and constant input zero
        points) whose input channels C are not a multiple of 4, where its products are exact in
        float32 -> the float direct convolution nn.conv2d_nchwc on the integer values, cast back:

            cast<int32>(conv2d_nchwc(float32(x) - x_zp, float32(w)))

        The rule (AlterOpLayout option `float_narrow_int8`: -1, the default, as the target's
        dot-product form says, targets/isa/<arch>.yaml dot_u8s8 `narrow`, Target.narrow_int8_conv;
        1 on; 0 off, the u8s8 row kernel of qnn_conv2d_rows): a conv with C % 4 != 0 (an image
        stem, C = 3) fills 3 of the 4 u8 x s8 products of every dot-product step; measured on
        resnet_style_cnn's 3x3 3 -> 16 stem, one thread, the row kernel beats this float conv with
        vpdpbusd (26 + 8 us against 37 + 4 at 64 x 64, the input's quantize and pad included)
        and loses with AVX2's exact vpmaddubsw form (70 + 11 against 65 + 4); the channel-quad
        kernel it replaced took 49 + 15 and 110 us there. The issue's rule for ops that do not win in
        integers: they stay float between a dequantize and a quantize; here the float conv runs on
        the dequantize's integer part (x - x_zp) and the int8 weights, so its output is the int32
        accumulator of the integer conv, bit for bit, and what follows (bias add, requantize) is
        unchanged. Exact because every partial sum is an integer of magnitude at most
        max_o sum_{ic,kh,kw} |w[o]| x max |x - x_zp| < 2^24 (checked here on the constant weight;
        float32 holds every integer below 2^24 and an FMA rounds once), whatever the summation
        order; the direct form only (Winograd's transforms are not integer-exact). The padding
        that nn.conv2d_nchwc adds is 0 = x_zp - x_zp, as the integer conv's. The output is NCHW16c,
        as the u8s8 kernel's (its consumers read either without a layout_transform). None where
        the bound fails (then the u8s8 kernel)."""
        data, weight, x_zp, _ = e.inputs
        zp = int(x_zp.value)
        lo, hi = (0, 255) if data.dtype == "uint8" else (-128, 127)
        reach = max(abs(lo - zp), abs(hi - zp))
        w = weight.value.astype(np.int64)
        if reach * int(np.abs(w).sum(axis=(1, 2, 3)).max()) >= FLOAT32_EXACT_INT:
            return None
        c = data.shape[1]
        oc_bn = BLOCK_N  # the u8s8 kernels' output block (qnn_conv2d: O % 16 == 0): no layout_transform between
        ic_bn = self.data_block(data) or self.block_of(c)
        name = weight.name or "weight"
        x = self.as_layout(data, blocked_layout(ic_bn))
        xf = make_call("subtract", [make_call("cast", [x], {"dtype": "float32"}),
                                    Constant(np.array(zp, np.float32), f"{name}_input_zero_point_f32")])
        # the packed weight stays int8 in the params; a cast kernel widens it at run time (C x KH x KW x O elements)
        packed = Constant(pack_weight(weight.value, ic_bn, oc_bn, False), f"{name}_OIHW{ic_bn}i{oc_bn}o")
        packed = make_call("cast", [packed], {"dtype": "float32"})
        attrs = {k: e.attrs[k] for k in ("strides", "padding", "dilation")}
        attrs.update(groups=1, out_layout=blocked_layout(oc_bn))
        conv = make_call("nn.conv2d_nchwc", [xf, packed], attrs, name=e.name)
        return make_call("cast", [conv], {"dtype": "int32"}), blocked_layout(oc_bn)

    def qnn_requantize(self, e: Call):
        """qnn.requantize of a blocked accumulator keeps its layout: a scalar scale as is, a
        constant per-channel one (axis 1) read through the op's `layout` attribute."""
        x, scale, zp = e.inputs
        layout = self.layout_of(x)
        if layout == NCHW or len(e.shape) != 4 or self.layout_of(scale) != NCHW or self.layout_of(zp) != NCHW:
            return None
        attrs = dict(e.attrs)
        if scale.shape != ():
            if e.attrs.get("axis", 1) != 1 or not isinstance(scale, Constant):
                return None
            attrs["layout"] = layout
        if self.memo[x][0] in self.padded:
            return None
        return make_call("qnn.requantize", [self.memo[x][0], scale, zp], attrs, name=e.name), layout

    def unary(self, e: Call):
        (x,) = e.inputs
        layout = self.layout_of(x)
        if layout == NCHW:
            return None
        return self.keep_padding(x, make_call(e.op, [self.memo[x][0]], e.attrs, name=e.name)), layout

    def binary(self, e: Call):
        blocked = [i for i in e.inputs if self.layout_of(i) != NCHW]
        if not blocked or len(e.shape) != 4 or blocked[0].shape[1] != e.shape[1]:
            return None
        layout = self.layout_of(blocked[0])
        block = channel_block(layout)
        channels = e.shape[1]
        # one padded tensor (padded_conv2d) and Constants: the constants are padded alike
        padded = self.memo[blocked[0]][0] if len(blocked) == 1 else None
        padded = padded if padded in self.padded else None
        if padded is None and any(self.memo[i][0] in self.padded for i in blocked):
            return None   # two blocked tensors, one padded: both go back to NCHW
        if padded is not None:
            channels = padded.shape[1] * padded.shape[4]
        inputs = []
        for i in e.inputs:
            if padded is not None and i is blocked[0]:
                inputs.append(padded)
            elif padded is not None and not isinstance(i, Constant):
                return None
            elif self.layout_of(i) != NCHW or (len(i.shape) == 4 and tuple(i.shape) == tuple(e.shape)):
                inputs.append(self.as_layout(i, layout))
            elif isinstance(i, Constant):
                if i.value.size == 1 and i.value.ndim <= 1:
                    inputs.append(i)     # a scalar broadcasts the same in every layout
                    continue
                try:
                    value = i.value if padded is None else pad_channels(i.value, e.shape[1], channels)
                    value = blocked_constant(value, channels, block)
                except ValueError:
                    return None
                inputs.append(Constant(value, f"{i.name or 'const'}_{layout}"))
            else:
                return None
        out = make_call(e.op, inputs, e.attrs, name=e.name)
        if padded is not None:
            self.padded[out] = self.padded[padded]
        return out, layout

    def pool(self, e: Call):
        (x,) = e.inputs
        layout = self.layout_of(x)
        if layout == NCHW:
            return None
        new = make_call(e.op, [self.memo[x][0]], dict(e.attrs, layout=layout), name=e.name)
        return self.keep_padding(x, new), layout

    def keep_padding(self, old: Expr, new: Call) -> Call:
        """`new`, a per-channel op of `old`'s replacement, records the same padded channels."""
        if self.memo[old][0] in self.padded:
            self.padded[new] = self.padded[self.memo[old][0]]
        return new

    def concatenate(self, e: Call):
        if e.attrs["axis"] != 1 or len(e.shape) != 4 or all(self.layout_of(i) == NCHW for i in e.inputs):
            return None
        block = self.block_of(int(np.gcd.reduce([i.shape[1] for i in e.inputs])))
        if block < self.min_block:
            return None
        layout = blocked_layout(block)
        inputs = [self.as_layout(i, layout) for i in e.inputs]
        return make_call("concatenate", inputs, e.attrs, name=e.name), layout


def _cancel_transforms(graph: Graph) -> Graph:
    """layout_transform(layout_transform(x, A -> B), B -> C) -> layout_transform(x, A -> C), and
    A -> A (e.g. a round trip NCHW -> NCHW16c -> NCHW) -> x."""

    def fn(e, new_inputs):
        if not (isinstance(e, Call) and e.op == "layout_transform"):
            return None
        (x,) = new_inputs
        src = e.attrs["src_layout"]
        if isinstance(x, Call) and x.op == "layout_transform":
            src, x = x.attrs["src_layout"], x.inputs[0]
        if src == e.attrs["dst_layout"]:
            return x
        return make_call("layout_transform", [x], dict(e.attrs, src_layout=src), name=e.name)

    return rewrite(graph, fn)


def _plan_winograd(graph: Graph, target, min_block: int, override: int, size_budget: float,
                   measured: dict | None = None) -> dict:
    """{nn.conv2d Call: Winograd tile} (tvmc.ops.cpu.conv2d_winograd.plan_winograd) for the
    float groups-1 convs with a Constant weight that the conv2d rule blocks, their transformed
    weights adding at most (size_budget - 1) x the bytes of the graph's constants (0 or inf: no
    budget); a conv of symbolic shape takes the form that the cost table says serves its range
    best (plan_winograd's samples, _range_samples). `measured`: plan_winograd's measured costs."""
    lanes = target.vector_lanes("float32")
    eligible = [e for e in graph.calls()
                if e.op == "nn.conv2d" and isinstance(e.inputs[1], Constant) and e.dtype in _DTYPES
                and len(e.inputs[0].shape) == 4 and channel_block_for(e.shape[1], lanes) >= min(min_block, lanes)]
    convs = [(e, tuple(symbolic.upper_bound(d) for d in e.inputs[0].shape), e.inputs[1].shape, e.attrs,
              e.inputs[1].value.itemsize) for e in eligible]
    samples = {e: _range_samples(e.inputs[0].shape) for e in eligible if e.type.is_symbolic}
    budget = np.inf
    if size_budget and not np.isinf(size_budget):
        budget = max(0.0, (size_budget - 1) * _constant_bytes(graph))
    return plan_winograd(convs, target, override, budget, measured, samples)


def _constant_bytes(graph: Graph, seen: set | None = None) -> int:
    """Bytes of the Constants of `graph` and of the bodies of its run-time loops (control.loop's
    attrs["body"], each LoopBody once, nested ones too): the model's weights, where a recurrent
    layer over a symbolic length keeps its own in its loop body (a CRNN's LSTMs: 15% of them)."""
    seen = set() if seen is None else seen
    total = 0
    for e in graph.topo():
        if isinstance(e, Constant):
            total += e.value.nbytes
        elif isinstance(e, Call) and e.op == "control.loop" and e.attrs["body"] not in seen:
            seen.add(e.attrs["body"])
            total += _constant_bytes(e.attrs["body"].graph, seen)
    return total


RANGE_SAMPLES = 6  # sizes per symbolic range at which _plan_winograd weighs a conv's forms


def _range_samples(shape) -> list:
    """`shape` (dimensions: ints and graph SymExprs, variables with lo >= 1) at RANGE_SAMPLES sizes spread geometrically
    over its variables' ranges, every variable at the same fraction of its range (lo first, the
    upper bounds last)."""
    variables = symbolic.free_vars(shape)
    out = []
    for k in range(RANGE_SAMPLES):
        q = k / (RANGE_SAMPLES - 1)
        values = {v.name: round(v.lo * (v.hi / v.lo) ** q) for v in variables}  # lo >= 1 (CompileOptions)
        out.append(tuple(int(symbolic.substitute(d, values)) for d in shape))
    return out


def _measured_forms(probe: "_Rewriter", lookup) -> dict:
    """{nn.conv2d Call: {m: seconds}} of the Winograd-eligible convs that `probe` (a _Rewriter
    walked over the graph) blocked: the best record's cost (lookup.cost_s, over the op's
    implementations) of each form the records hold, m = 0 nn.conv2d_nchwc, 2 and 4
    nn.conv2d_winograd_nchwc, with the blocks the walk gave the conv (a form is built on zero
    weights of the conv's shape to learn its workload)."""
    from tvmc.ops.fused import workload

    target = probe.target
    out: dict = {}
    for e, (x, ic_bn, oc_bn) in probe.conv_blocks.items():
        weight = e.inputs[1]
        if not winograd_eligible(e.inputs[0].shape, weight.shape, e.attrs):
            continue
        zeros = np.zeros(weight.shape, weight.value.dtype)
        times = {}
        for m in (0, *WINOGRAD_IMPL_TILES):
            call = probe.conv_form(e, x, ic_bn, oc_bn, m, zeros)
            wl = workload(call)
            costs = [c for impl in get_op(call.op).implementations(target.family, wl, target)
                     if (c := lookup.cost_s(impl.name, wl)) is not None]
            if costs:
                times[m] = min(costs)
        if times:  # plan_winograd uses them where they hold the direct form and a tile
            out[e] = times
    return out


@graph_pass("AlterOpLayout", opt_level=3, options={"min_block": 8, "winograd_tile_size": -1, "size_budget": 1.25,
                                                       "winograd_at_load": 1, "grouped": 1, "pad_channels": 16,
                                                       "float_narrow_int8": -1, "int8_saturate": 0})
def alter_op_layout(graph: Graph, ctx) -> Graph:
    """Store convolution activations channel-blocked and dense weights column-blocked on CPU
    targets (TVM's AlterOpLayout with topi/x86/conv2d_alter_op.py: conv2d -> conv2d_NCHWc,
    dense -> dense_pack).

    Each nn.conv2d (4-D float data, Constant OIHW weight, groups 1 or depthwise with
    groups == C == O) becomes nn.conv2d_nchwc on NCHW[ic_bn]c data with the weight packed
    here, at compile time, to OIHW[ic_bn]i[oc_bn]o ([O//oc_bn, C//ic_bn, KH, KW, ic_bn, oc_bn];
    depthwise: OIHW1i[oc_bn]o), producing NCHW[oc_bn]c. oc_bn = the largest power of two
    <= the target's float32 vector lanes (16 with AVX-512) dividing O; ic_bn = the block the
    input already has, else the same rule on C (1 for a 3-channel image). Convs whose oc_bn
    would be below min(`min_block` option (8), vector lanes) stay NCHW (a narrower block
    leaves most of each vector register idle).
    Each grouped (1 < groups, not depthwise) nn.conv2d becomes nn.conv2d_nchwc with groups (TVM's
    group_conv2d_NCHWc) when a block of at least that minimum divides O/g: the blocks are chosen
    per conv, oc_bn by the same rule on O/g, ic_bn the data's block where it divides C/g, else
    the rule on C/g (group_conv2d); a grouped 1x1 stride-1 unpadded conv below that minimum runs
    as one GEMM per group over the flattened image in NCHW (group_conv2d_as_matmul: ShuffleNet's
    34 and 68 channels per group); option `grouped` 0 keeps every grouped conv NCHW on the
    generic kernel (the behaviour before grouped convs were blocked, for comparisons).
    A groups-1 nn.conv2d (not Winograd) whose O the vector lanes do not divide, where rounding O up
    to twice the lanes, else to the lanes, adds at most O / `pad_channels` (option, 16; 0: never)
    channels, computes the rounded-up channels in NCHW[lanes]c with zero weights in the extra ones
    (padded_conv2d): the padding flows through elementwise ops, pooling and broadcasts against
    Constants (padded with zeros) and is sliced off (strided_slice) where the tensor goes back to
    NCHW or meets another op. SqueezeNet's 512 -> 1000 1x1 classifier conv at 13x13 (a third of
    the model's time at 1 thread on AVX-512, interleaved runs, 1 other core busy) ran at 78-86
    GFLOP/s in blocks of 8 (half of each register idle), 116-121 in 63 blocks of 16 (1008
    channels: an odd count, so the x86 fallback's one-block tile (1, 13)) and ~135 in 64 blocks
    (1024: the two-block tile (2, 13); 1686 -> 1311 us in one run).
    A 3x3 stride-1 groups-1 conv that tvmc.ops.cpu.conv2d_winograd.winograd_tile_size selects
    for the target (option `winograd_tile_size`: -1 that rule, 0 never, 2 or 4 every eligible
    conv with that output tile) becomes nn.conv2d_winograd_nchwc instead, its weight transformed
    to U = G g G^T blocked as [alpha^2, O//oc_bn, C//ic_bn, ic_bn, oc_bn]: by default (option
    `winograd_at_load` 1) by nn.winograd_weight_transform, a kernel the executors run once when
    they load the artifact, on the weight packed here as for nn.conv2d_nchwc, so the params stay
    the size of the model's weights; with `winograd_at_load` 0 here, at compile time, and then
    option `size_budget` (1.25; 0 or inf: none) bounds them: the transformed weights ((m+2)^2 / 9
    times the direct ones) may grow the graph's constants to at most that many times their bytes
    before the pass; the forms (direct, F(2x2), F(4x4) per conv) that save the most time in all
    within it are taken, the others keep the direct form (plan_winograd). A conv of symbolic shape is weighed
    at sizes across its range (_range_samples) and runs Winograd in size buckets of its tiles.

    Each nn.matmul whose N the vector lanes do not divide, or whose M no row tile of 4 to 8
    divides, computes padded sums ([..., Mp, Np]) and keeps their leading M x N corner
    (`padded` attribute, tvmc.ops.cpu.dense.matmul_padding).

    Each qnn.dense with a Constant int8 weight and zero weight zero points becomes qnn.dense_u8s8
    (the dot-product instructions, tvmc/ops/cpu/int8.py) minus its zero-point term (qnn_dense).
    Each groups-1 qnn.conv2d with a Constant int8 weight, zero weight zero points, a Constant input
    zero point and O a multiple of 16 becomes qnn.conv2d_nchwc_u8s8 on NCHW[ib]c uint8 data (padded
    with the shifted input zero point), producing NCHW16c, minus its zero-point term (qnn_conv2d);
    qnn.requantize keeps the blocked layout (a per-channel scale through its `layout` attribute),
    and qnn.quantize / qnn.dequantize pass it on as the binary ops do. Such a qnn.conv2d whose C is
    not a multiple of 4 (an image stem) becomes instead either qnn.conv2d_nchw_u8s8, the u8s8 kernel
    over 4 adjacent taps of a kernel row on the planar data padded in the graph (qnn_conv2d_rows),
    or, where its products are exact in float32, the float nn.conv2d_nchwc on the integer values
    (x - x_zp, w), cast to int32 (qnn_conv2d_float): option `float_narrow_int8` -1 (default) as the
    target's dot-product form says (Target.narrow_int8_conv: VNNI the row kernel, AVX2 and
    AVX-512BW the float conv), 1 the float conv, 0 the row kernel. Other qnn.conv2d (depthwise,
    grouped, asymmetric weights) stay NCHW on the generic kernels. Option `int8_saturate` (0): 1
    lets the u8 x s8 pairs of vpmaddubsw (AVX2, AVX-512BW without VNNI) saturate to int16, one
    vpmaddubsw per step whatever the weights, as onnxruntime's MLAS u8s8 kernels do on those CPUs
    (their outputs then differ from the exact product where two large weights of one sign meet
    large data; 7-bit weights, onnxruntime's reduce_range, never saturate); 0 keeps every form
    exact (tvmc/ops/cpu/int8.py). VNNI, ARM, wasm and GPU forms are exact either way.

    Each nn.dense with a Constant [N, K] weight becomes nn.dense_pack with the weight packed
    here to [N//bn, K, bn] (TVM's dense_alter_op: dense -> dense_pack), bn chosen like oc_bn
    from N (N=1000 -> 8); where no block of at least the minimum divides N (N=6625, a text
    recognizer's classifier), bn is the vector lanes and the last block is padded with zero
    columns (dense_pack's `units` = N); a dense with N below the lanes stays.

    The blocked layout then flows through: ELEMWISE ops (relu, clip, ...); BROADCAST ops whose
    other operand is blocked too, a 4-D tensor of the same shape (transformed), or a Constant
    ([C,1,1] -> [C//c,1,1,c], converted here); pooling (`layout` attribute); concatenate on
    the channel axis when every input's channel count divides by a block >= min_block; the channel
    shuffle reshape [N, g, C/g, H, W] -> transpose (0, 2, 1, 3, 4) -> reshape [N, C, H, W] becomes
    one channel_shuffle op in the blocked layout (any block: it gathers each output channel from
    its source; channel_shuffle). Every
    other consumer and every graph output gets a layout_transform back to NCHW, once per
    tensor; then adjacent layout_transforms compose and inverse pairs cancel.

    GPU targets with a 4 x int8 dot product (Target.gpu_int8_dot: CUDA's dp4a, OpenCL)
    take the qnn.dense and qnn.conv2d rewrites alone (onto the GPU kernels of
    tvmc/ops/gpu/int8.py), their blocked outputs flowing through qnn.requantize, elementwise and
    broadcast ops as above; pooling, concatenate and every float op keep NCHW there.

    Runs only with a CPU target, or such a GPU target, in the PassContext (`ctx.target`);
    without one, or for other targets, the graph is returned unchanged.
    """
    target = ctx.target
    family = getattr(target, "family", None)
    if target is None or not (family == "cpu" or target.gpu_int8_dot):
        return graph
    min_block = ctx.option("AlterOpLayout", "min_block")
    override, budget = ctx.option("AlterOpLayout", "winograd_tile_size"), ctx.option("AlterOpLayout", "size_budget")
    at_load = bool(ctx.option("AlterOpLayout", "winograd_at_load"))
    if at_load:
        budget = 0  # the params keep the 3x3 weights: no budget to plan within
    grouped, pad = bool(ctx.option("AlterOpLayout", "grouped")), ctx.option("AlterOpLayout", "pad_channels")
    qnn_only = family != "cpu"
    winograd = {} if qnn_only else _plan_winograd(graph, target, min_block, override, budget)
    lookup = ctx.config_lookup
    if not qnn_only and override < 0 and lookup is not None and lookup.workloads("conv2d_winograd_nchwc.cpu"):
        probe = _Rewriter(target, min_block, winograd, grouped, pad, winograd_at_load=at_load)  # each conv's blocks
        for e in graph.topo():
            probe.visit(e)
        measured = _measured_forms(probe, lookup)
        if measured:
            winograd = _plan_winograd(graph, target, min_block, override, budget, measured)
    rw = _Rewriter(target, min_block, winograd, grouped, pad, qnn_only,
                   int(ctx.option("AlterOpLayout", "float_narrow_int8")),
                   bool(ctx.option("AlterOpLayout", "int8_saturate")), at_load)
    for e in graph.topo():
        rw.visit(e)
    for v in graph.inputs:
        rw.memo.setdefault(v, (v, NCHW))
    outputs = [rw.plain(o) for o in graph.outputs]
    return _cancel_transforms(graph.with_outputs(outputs))

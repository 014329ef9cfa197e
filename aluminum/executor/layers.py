"""Builders that append ops to the default main program (parameters' initializers to the
default startup program), as Paddle's ``fluid.layers``."""
from __future__ import annotations

import zlib

import numpy as np

from .ir import Variable, default_main_program, default_startup_program, unique_name
from .parallel_do import ParallelDo  # noqa: F401 - Paddle's fluid.layers.ParallelDo


def _block():
    return default_main_program().global_block()


def _out(prefix: str, dtype: str = "float32") -> Variable:
    """A new variable; its shape and dtype are set by the op that writes it."""
    return _block().create_var(unique_name(prefix), (), dtype)


def _seed(name: str) -> int:
    """A parameter's initializer seed: the program seed and the parameter's name, so that
    two builds of one network (on every rank) initialize identically."""
    return (default_startup_program().random_seed * 1_000_003
            + zlib.crc32(name.encode())) % (2 ** 32)


def data(name: str, shape, dtype: str = "float32", append_batch_size: bool = True) -> Variable:
    """An input fed at run time; ``shape`` without the batch dimension unless
    ``append_batch_size=False``."""
    shape = ((-1,) if append_batch_size else ()) + tuple(shape)
    return _block().create_var(name, shape, dtype, stop_gradient=True)


def create_parameter(shape, dtype: str = "float32", name: str | None = None,
                     init: str = "xavier", value: float = 0.0) -> Variable:
    """A trainable parameter, initialized in the startup program (``xavier``: uniform with
    Glorot's bound; ``constant``: ``value``)."""
    name = name or unique_name("param")
    shape = tuple(shape)
    for program in (default_main_program(), default_startup_program()):
        program.global_block().create_var(name, shape, dtype, persistable=True,
                                          is_parameter=True)
    startup = default_startup_program().global_block()
    if init == "constant":
        startup.append_op("fill_constant", {}, {"Out": [name]},
                          {"shape": shape, "value": value, "dtype": dtype})
    else:
        fan_in, fan_out = shape[0], shape[-1]
        bound = float(np.sqrt(6.0 / (fan_in + fan_out)))
        startup.append_op("uniform_random", {}, {"Out": [name]},
                          {"shape": shape, "min": -bound, "max": bound, "dtype": dtype,
                           "seed": _seed(name)})
    return _block().var(name)


def _op(type_: str, inputs: dict, attrs: dict | None = None, prefix: str | None = None,
        dtype: str = "float32", shard=None) -> Variable:
    out = _out(prefix or type_, dtype)
    op = _block().append_op(type_, {k: [v.name for v in vs] for k, vs in inputs.items()},
                            {"Out": [out.name]}, attrs)
    if shard is not None:
        op.shard(shard)
    return out


def redistribute(x: Variable, layout, grad_layout=None, input_grad_layout=None) -> Variable:
    """``x`` (laid out as ``x.layout``) laid out as ``layout``: the redistribution op
    (layouts/ops.py; its gradient runs the route back)."""
    from .layouts.ops import append_redistribute
    return append_redistribute(x, layout, grad_layout, input_grad_layout)


def matmul(x: Variable, y: Variable, shard=None) -> Variable:
    """``x @ y``; ``shard``: the strategy ``((m, k), (k, n))`` (parts of each dimension,
    see docs/auto_parallel.md)."""
    return _op("matmul", {"X": [x], "Y": [y]}, shard=shard)


def elementwise_add(x: Variable, y: Variable, shard=None) -> Variable:
    return _op("elementwise_add", {"X": [x], "Y": [y]}, shard=shard)


def elementwise_sub(x: Variable, y: Variable, shard=None) -> Variable:
    return _op("elementwise_sub", {"X": [x], "Y": [y]}, shard=shard)


def elementwise_mul(x: Variable, y: Variable, shard=None) -> Variable:
    return _op("elementwise_mul", {"X": [x], "Y": [y]}, shard=shard)


def relu(x: Variable, shard=None) -> Variable:
    return _op("relu", {"X": [x]}, shard=shard)


def tanh(x: Variable, shard=None) -> Variable:
    return _op("tanh", {"X": [x]}, shard=shard)


def sigmoid(x: Variable, shard=None) -> Variable:
    return _op("sigmoid", {"X": [x]}, shard=shard)


def softmax(x: Variable) -> Variable:
    return _op("softmax", {"X": [x]})


_ACTIVATIONS = {None: None, "relu": relu, "tanh": tanh, "sigmoid": sigmoid, "softmax": softmax}


def fc(input: Variable, size: int, act: str | None = None, name: str | None = None,
       dtype: str | None = None, shard=None) -> Variable:
    """``act(input @ W + b)``; ``input`` [N, K] (higher ranks are flattened after dim 0);
    the parameters take ``input``'s dtype unless ``dtype`` says otherwise.  ``shard``: the
    matmul's strategy ``((m, k), (k, n))`` (the bias add and activation follow its
    output's layout; see docs/auto_parallel.md)."""
    prefix = name or unique_name("fc")
    dtype = dtype or input.dtype
    if len(input.shape) > 2:
        input = reshape(input, (0, int(np.prod(input.shape[1:]))))
    weight = create_parameter((input.shape[1], size), dtype, f"{prefix}.w")
    bias = create_parameter((size,), dtype, f"{prefix}.b", init="constant")
    out = elementwise_add(matmul(input, weight, shard=shard), bias)
    activation = _ACTIVATIONS[act]
    return out if activation is None else activation(out)


def softmax_with_cross_entropy(logits: Variable, label: Variable, shard=None) -> Variable:
    """Per-row loss [N, 1]; ``shard``: ``((n, c), (n, 1))``, the class dimension's parts
    ``c`` making it Megatron's vocabulary-parallel cross-entropy."""
    softmax_out = _out("softmax")
    loss = _out("cross_entropy")
    op = _block().append_op("softmax_with_cross_entropy",
                            {"Logits": [logits.name], "Label": [label.name]},
                            {"Softmax": [softmax_out.name], "Loss": [loss.name]})
    if shard is not None:
        op.shard(shard)
    return loss


def square_error_cost(input: Variable, label: Variable) -> Variable:
    return _op("square_error_cost", {"X": [input], "Y": [label]})


def mean(x: Variable, shard=None) -> Variable:
    return _op("mean", {"X": [x]}, shard=shard)


def reduce_sum(x: Variable, shard=None) -> Variable:
    """The sum of every element, shape [1]."""
    return _op("reduce_sum", {"X": [x]}, shard=shard)


def scale(x: Variable, scale: float = 1.0, bias: float = 0.0) -> Variable:
    return _op("scale", {"X": [x]}, {"scale": scale, "bias": bias})


def reshape(x: Variable, shape, shard=None) -> Variable:
    return _op("reshape", {"X": [x]}, {"shape": tuple(shape)}, shard=shard)


def concat(inputs: list[Variable], axis: int = 0) -> Variable:
    return _op("concat", {"X": list(inputs)}, {"axis": axis})


def split(x: Variable, sections: list[int], axis: int = 0) -> list[Variable]:
    outs = [_out("split") for _ in sections]
    _block().append_op("split", {"X": [x.name]}, {"Out": [o.name for o in outs]},
                       {"sections": tuple(sections), "axis": axis})
    return outs


def dropout(x: Variable, dropout_prob: float, is_test: bool = False,
            seed: int | None = None) -> Variable:
    out, mask = _out("dropout"), _out("dropout_mask")
    _block().append_op("dropout", {"X": [x.name]}, {"Out": [out.name], "Mask": [mask.name]},
                       {"dropout_prob": dropout_prob, "is_test": is_test,
                        "seed": _seed(out.name) if seed is None else seed})
    return out


def embedding(input: Variable, size: tuple[int, int], name: str | None = None,
              dtype: str = "float32", shard=None) -> Variable:
    """``lookup_table``: rows of a [vocabulary, width] parameter picked by int64 ids;
    ``shard``: ``((v, d), (n, 1))``, ``v`` parts of the rows making it Megatron's
    vocabulary-parallel embedding (its output a Partial sum)."""
    weight = create_parameter(size, dtype, name or unique_name("embedding.w"))
    return _op("lookup_table", {"W": [weight], "Ids": [input]}, prefix="embedding",
               dtype=dtype, shard=shard)


def conv2d(input: Variable, num_filters: int, filter_size: int, stride: int = 1,
           padding: int = 0, act: str | None = None, name: str | None = None,
           dtype: str | None = None) -> Variable:
    """NCHW convolution (im2col) plus a per-filter bias (parameters in ``input``'s dtype
    unless ``dtype`` says otherwise)."""
    prefix = name or unique_name("conv2d")
    dtype = dtype or input.dtype
    weight = create_parameter((num_filters, input.shape[1], filter_size, filter_size), dtype,
                              f"{prefix}.w")
    out = _out(prefix)
    _block().append_op("conv2d", {"Input": [input.name], "Filter": [weight.name]},
                       {"Output": [out.name]}, {"strides": stride, "paddings": padding})
    bias = create_parameter((num_filters, 1, 1), dtype, f"{prefix}.b", init="constant")
    out = elementwise_add(out, bias)
    activation = _ACTIVATIONS[act]
    return out if activation is None else activation(out)


def pool2d(input: Variable, pool_size: int, pool_type: str = "max",
           pool_stride: int | None = None) -> Variable:
    return _op("pool2d", {"X": [input]}, {"ksize": pool_size, "pooling_type": pool_type,
                                          "strides": pool_stride or pool_size})


def batch_norm(input: Variable, is_test: bool = False, momentum: float = 0.9,
               epsilon: float = 1e-5, name: str | None = None) -> Variable:
    """Per-channel normalization; the running mean and variance are persistable and
    updated in place in training."""
    prefix = name or unique_name("batch_norm")
    dtype = input.dtype
    channels = input.shape[1]
    scale = create_parameter((channels,), dtype, f"{prefix}.scale", init="constant", value=1)
    bias = create_parameter((channels,), dtype, f"{prefix}.bias", init="constant")
    stats = []
    for stat, value in (("mean", 0.0), ("variance", 1.0)):
        stat_name = f"{prefix}.{stat}"
        for program in (default_main_program(), default_startup_program()):
            program.global_block().create_var(stat_name, (channels,), dtype,
                                              persistable=True, stop_gradient=True)
        default_startup_program().global_block().append_op(
            "fill_constant", {}, {"Out": [stat_name]},
            {"shape": (channels,), "value": value, "dtype": dtype})
        stats.append(stat_name)
    out, saved_mean, saved_var = _out(prefix), _out(prefix + ".saved"), _out(prefix + ".saved")
    _block().append_op("batch_norm",
                       {"X": [input.name], "Scale": [scale.name], "Bias": [bias.name],
                        "Mean": [stats[0]], "Variance": [stats[1]]},
                       {"Y": [out.name], "MeanOut": [stats[0]], "VarianceOut": [stats[1]],
                        "SavedMean": [saved_mean.name], "SavedVariance": [saved_var.name]},
                       {"is_test": is_test, "momentum": momentum, "epsilon": epsilon})
    return out

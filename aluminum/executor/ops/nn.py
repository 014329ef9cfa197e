"""Convolution, pooling and batch normalization (NCHW), by im2col."""
from __future__ import annotations

import numpy as np

from ..errors import ProgramError
from .registry import OpKind, register


def _out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return -1 if size == -1 else (size + 2 * pad - kernel) // stride + 1


def _im2col(x, kh, kw, stride, pad):
    """[N, C, H, W] -> [N, C*kh*kw, OH*OW] patches (a strided view, then one copy)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = _out_size(h, kh, stride, pad), _out_size(w, kw, stride, pad)
    s = padded.strides
    patches = np.lib.stride_tricks.as_strided(
        padded, (n, c, kh, kw, oh, ow), (s[0], s[1], s[2], s[3], s[2] * stride, s[3] * stride))
    return patches.reshape(n, c * kh * kw, oh * ow), oh, ow


def _col2im(cols, shape, kh, kw, stride, pad):
    """The adjoint of ``_im2col``: scatter-add patches back into [N, C, H, W]."""
    n, c, h, w = shape
    oh, ow = _out_size(h, kh, stride, pad), _out_size(w, kw, stride, pad)
    padded = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    cols = cols.reshape(n, c, kh, kw, oh, ow)
    for i in range(kh):
        for j in range(kw):
            padded[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] += cols[:, :, i, j]
    return padded[:, :, pad:pad + h, pad:pad + w]


@register
class Conv2d(OpKind):
    """``Output = conv(Input [N, C, H, W], Filter [M, C, kh, kw])``, ``strides``/``paddings``
    attrs (one int each, both spatial dimensions)."""

    type = "conv2d"

    def infer(self, block, op):
        x, f = block.var(op.inputs["Input"][0]), block.var(op.inputs["Filter"][0])
        if len(x.shape) != 4 or len(f.shape) != 4 or f.shape[1] != x.shape[1]:
            raise ProgramError(f"op conv2d: expected Input [N, C, H, W] and Filter "
                               f"[M, C, kh, kw], got {x.name} {list(x.shape)} and "
                               f"{f.name} {list(f.shape)}")
        stride, pad = op.attrs.get("strides", 1), op.attrs.get("paddings", 0)
        out = block.var(op.outputs["Output"][0])
        out.shape = (x.shape[0], f.shape[0], _out_size(x.shape[2], f.shape[2], stride, pad),
                     _out_size(x.shape[3], f.shape[3], stride, pad))
        out.dtype = x.dtype

    def compute(self, ins, attrs, ctx, out):
        x, f = ins["Input"][0], ins["Filter"][0]
        cols, oh, ow = _im2col(x, f.shape[2], f.shape[3], attrs.get("strides", 1),
                               attrs.get("paddings", 0))
        result = np.einsum("mk,nkp->nmp", f.reshape(f.shape[0], -1), cols)
        return {"Output": [result.reshape(x.shape[0], f.shape[0], oh, ow)]}

    def backward(self, ins, outs, douts, attrs, out):
        x, f, d = ins["Input"][0], ins["Filter"][0], douts["Output"][0]
        stride, pad = attrs.get("strides", 1), attrs.get("paddings", 0)
        cols, _, _ = _im2col(x, f.shape[2], f.shape[3], stride, pad)
        d = d.reshape(d.shape[0], d.shape[1], -1)
        d_filter = out.get("Filter")
        if d_filter is None:
            d_filter = np.einsum("nmp,nkp->mk", d, cols).reshape(f.shape)
        else:   # a destination is C-contiguous: its [M, K] reshape is a view
            np.einsum("nmp,nkp->mk", d, cols, out=d_filter.reshape(f.shape[0], -1))
        d_cols = np.einsum("mk,nmp->nkp", f.reshape(f.shape[0], -1), d)
        return {"Input": [_col2im(d_cols, x.shape, f.shape[2], f.shape[3], stride, pad)],
                "Filter": [d_filter]}


@register
class Pool2d(OpKind):
    """``pooling_type`` "max" or "avg" over ``ksize`` windows with ``strides`` (no
    padding)."""

    type = "pool2d"

    def infer(self, block, op):
        x = block.var(op.inputs["X"][0])
        k, s = op.attrs["ksize"], op.attrs.get("strides", op.attrs["ksize"])
        out = block.var(op.outputs["Out"][0])
        out.shape = (x.shape[0], x.shape[1], _out_size(x.shape[2], k, s, 0),
                     _out_size(x.shape[3], k, s, 0))
        out.dtype = x.dtype

    def _windows(self, x, attrs):
        k = attrs["ksize"]
        n, c = x.shape[:2]
        cols, oh, ow = _im2col(x.reshape(n * c, 1, *x.shape[2:]), k, k,
                               attrs.get("strides", k), 0)
        return cols.reshape(n, c, k * k, oh, ow), oh, ow

    def compute(self, ins, attrs, ctx, out):
        windows, _, _ = self._windows(ins["X"][0], attrs)
        reduce = windows.max if attrs.get("pooling_type", "max") == "max" else windows.mean
        return {"Out": [reduce(axis=2)]}

    def backward(self, ins, outs, douts, attrs, out):
        x, d = ins["X"][0], douts["Out"][0]
        k = attrs["ksize"]
        windows, oh, ow = self._windows(x, attrs)
        if attrs.get("pooling_type", "max") == "max":
            first = windows.argmax(axis=2)[:, :, None]
            weights = (np.arange(k * k)[None, None, :, None, None] == first).astype(x.dtype)
        else:
            weights = np.full(windows.shape, 1.0 / (k * k), x.dtype)
        d_cols = weights * d[:, :, None]
        n, c = x.shape[:2]
        grad = _col2im(d_cols.reshape(n * c, k * k, oh * ow), (n * c, 1, *x.shape[2:]), k, k,
                       attrs.get("strides", k), 0)
        return {"X": [grad.reshape(x.shape)]}


@register
class BatchNorm(OpKind):
    """Per-channel normalization of [N, C, ...]: batch statistics in training (``is_test``
    false: the running ``Mean``/``Variance`` are updated with ``momentum``), running ones
    in evaluation; ``Y = Scale * (X - mean) / sqrt(var + epsilon) + Bias``."""

    type = "batch_norm"

    def infer(self, block, op):
        x = block.var(op.inputs["X"][0])
        y = block.var(op.outputs["Y"][0])
        y.shape, y.dtype = x.shape, x.dtype
        for slot in ("SavedMean", "SavedVariance"):
            for name in op.outputs.get(slot, []):
                v = block.var(name)
                v.shape, v.dtype = (x.shape[1],), x.dtype

    @staticmethod
    def _axes(x):
        return (0,) + tuple(range(2, x.ndim))

    @staticmethod
    def _channel(v, x):
        return v.reshape((1, -1) + (1,) * (x.ndim - 2))

    def compute(self, ins, attrs, ctx, out):
        x, scale, bias = ins["X"][0], ins["Scale"][0], ins["Bias"][0]
        eps, momentum = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
        axes, ch = self._axes(x), self._channel
        if attrs.get("is_test", False):
            mean, var = ins["Mean"][0], ins["Variance"][0]
            running_mean, running_var = mean, var
        else:
            mean, var = x.mean(axis=axes), x.var(axis=axes)
            running_mean = momentum * ins["Mean"][0] + (1 - momentum) * mean
            running_var = momentum * ins["Variance"][0] + (1 - momentum) * var
        inv_std = 1 / np.sqrt(var + eps)
        y = ch(scale, x) * (x - ch(mean, x)) * ch(inv_std, x) + ch(bias, x)
        dtype = x.dtype
        return {"Y": [y.astype(dtype)], "MeanOut": [running_mean.astype(dtype)],
                "VarianceOut": [running_var.astype(dtype)],
                "SavedMean": [mean.astype(dtype)], "SavedVariance": [inv_std.astype(dtype)]}

    def backward(self, ins, outs, douts, attrs, out):
        x, scale, d = ins["X"][0], ins["Scale"][0], douts["Y"][0]
        axes, ch = self._axes(x), self._channel
        mean, inv_std = outs["SavedMean"][0], outs["SavedVariance"][0]
        x_hat = (x - ch(mean, x)) * ch(inv_std, x)
        d_bias = d.sum(axis=axes, out=out.get("Bias"))
        d_scale = (d * x_hat).sum(axis=axes, out=out.get("Scale"))
        if attrs.get("is_test", False):
            d_x = d * ch(scale * inv_std, x)
        else:
            count = x.size // x.shape[1]
            d_x = ch(scale * inv_std, x) / count * (
                count * d - ch(d_bias, x) - x_hat * ch(d_scale, x))
        return {"X": [d_x], "Scale": [d_scale], "Bias": [d_bias],
                "Mean": [None], "Variance": [None]}

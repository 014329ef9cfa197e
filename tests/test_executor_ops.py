"""Every differentiable op's analytic gradient against central finite differences in
float64 (Paddle's OpTest.check_grad idea), on shapes drawn by hypothesis, and forward
kernels against direct numpy formulas."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aluminum.executor.ops import registry
from aluminum.executor.ops.registry import ANYWHERE, Destinations

settings.register_profile("executor", derandomize=True, deadline=None, max_examples=12,
                          database=None)
settings.load_profile("executor")

DIMS = st.integers(1, 4)


def check_grad(op_type, ins, attrs=None, wrt=None, seed=0, of=None):
    """Compare ``backward`` with central differences of sum(out * R) for random R, over
    every output or those in ``of`` (outputs nothing differentiates, such as batch norm's
    running statistics, get R = 0)."""
    kind = registry.get(op_type)
    attrs = attrs or {}
    outs = kind.compute(ins, attrs, None, ANYWHERE)
    rng = np.random.default_rng(seed)
    weights = {slot: [rng.normal(size=o.shape) * (of is None or slot in of) for o in arrays]
               for slot, arrays in outs.items()}

    def objective():
        result = kind.compute(ins, attrs, None, ANYWHERE)
        return sum(float((o * w).sum()) for slot, arrays in result.items()
                   for o, w in zip(arrays, weights[slot]))

    analytic = kind.backward(ins, outs, weights, attrs, ANYWHERE)
    check_destinations(kind, ins, outs, weights, attrs, analytic)
    for slot in wrt or ins:
        for i, array in enumerate(ins[slot]):
            numeric = np.zeros_like(array)
            eps = 1e-6
            for index in np.ndindex(array.shape):
                saved = array[index]
                array[index] = saved + eps
                up = objective()
                array[index] = saved - eps
                down = objective()
                array[index] = saved
                numeric[index] = (up - down) / (2 * eps)
            got = analytic[slot][i]
            np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-7,
                                       err_msg=f"{op_type} d/d{slot}[{i}]")


def check_destinations(kind, ins, outs, douts, attrs, expected):
    """``backward`` handed a destination for every input gradient gives the same values,
    each either written into its destination (and returned as it) or returned elsewhere
    with the destination untouched (then the executor copies it in)."""
    out = Destinations({slot: [None if g is None else np.full_like(g, np.nan)
                               for g in grads] for slot, grads in expected.items()})
    got = kind.backward(ins, outs, douts, attrs, out)
    for slot, grads in expected.items():
        for i, grad in enumerate(grads):
            if grad is None:
                continue
            destination = out.get(slot, i)
            if got[slot][i] is destination:
                np.testing.assert_array_equal(destination, grad, err_msg=f"{slot}[{i}]")
            else:
                assert np.isnan(destination).all(), f"{kind.type} {slot}[{i}]: wrote half"
                np.testing.assert_array_equal(got[slot][i], grad, err_msg=f"{slot}[{i}]")


def away_from_zero(shape, seed):
    values = np.random.default_rng(seed).normal(size=shape)
    return np.where(np.abs(values) < 0.1, 0.5, values)


@given(m=DIMS, k=DIMS, n=DIMS, seed=st.integers(0, 99))
def test_matmul(m, k, n, seed):
    x, y = away_from_zero((m, k), seed), away_from_zero((k, n), seed + 1)
    np.testing.assert_allclose(registry.get("matmul").compute({"X": [x], "Y": [y]}, {},
                                                              None, ANYWHERE)["Out"][0],
                               np.einsum("mk,kn->mn", x, y))
    check_grad("matmul", {"X": [x], "Y": [y]})


@pytest.mark.parametrize("op", ["elementwise_add", "elementwise_sub", "elementwise_mul"])
@given(rows=DIMS, cols=DIMS, broadcast=st.sampled_from(["same", "row", "scalar"]),
       seed=st.integers(0, 99))
def test_elementwise_with_broadcasting(op, rows, cols, broadcast, seed):
    x = away_from_zero((rows, cols), seed)
    y_shape = {"same": (rows, cols), "row": (cols,), "scalar": (1,)}[broadcast]
    y = away_from_zero(y_shape, seed + 1)
    formula = {"elementwise_add": x + y, "elementwise_sub": x - y, "elementwise_mul": x * y}
    got = registry.get(op).compute({"X": [x], "Y": [y]}, {}, None, ANYWHERE)["Out"][0]
    np.testing.assert_allclose(got, formula[op])
    check_grad(op, {"X": [x], "Y": [y]})


@pytest.mark.parametrize("op", ["relu", "tanh", "sigmoid", "softmax", "mean"])
@given(rows=DIMS, cols=DIMS, seed=st.integers(0, 99))
def test_unary(op, rows, cols, seed):
    x = away_from_zero((rows, cols), seed)
    check_grad(op, {"X": [x]})


def test_unary_forward_formulas():
    x = np.array([[-1.0, 0.5, 2.0]])
    run = lambda op: registry.get(op).compute(  # noqa
        {"X": [x.copy()]}, {}, None, ANYWHERE)["Out"][0]
    np.testing.assert_allclose(run("relu"), [[0, 0.5, 2.0]])
    np.testing.assert_allclose(run("sigmoid"), 1 / (1 + np.exp(-x)))
    e = np.exp(x)
    np.testing.assert_allclose(run("softmax"), e / e.sum())
    np.testing.assert_allclose(run("mean"), [x.mean()])


@given(rows=DIMS, classes=st.integers(2, 5), seed=st.integers(0, 99))
def test_softmax_with_cross_entropy(rows, classes, seed):
    logits = away_from_zero((rows, classes), seed)
    label = np.random.default_rng(seed).integers(0, classes, (rows, 1))
    out = registry.get("softmax_with_cross_entropy").compute(
        {"Logits": [logits], "Label": [label]}, {}, None, ANYWHERE)
    expected = -np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True))[
        np.arange(rows), label[:, 0]]
    np.testing.assert_allclose(out["Loss"][0][:, 0], expected)
    check_grad("softmax_with_cross_entropy", {"Logits": [logits], "Label": [label]},
               wrt=["Logits"])


@given(rows=DIMS, cols=DIMS, seed=st.integers(0, 99))
def test_square_error_cost_and_scale(rows, cols, seed):
    x, y = away_from_zero((rows, cols), seed), away_from_zero((rows, cols), seed + 1)
    check_grad("square_error_cost", {"X": [x], "Y": [y]})
    check_grad("scale", {"X": [x]}, {"scale": 2.5, "bias": 1.0})


@given(rows=DIMS, cols=DIMS, seed=st.integers(0, 99))
def test_reshape_concat_split_sum(rows, cols, seed):
    x, y = away_from_zero((rows, cols), seed), away_from_zero((rows, cols + 1), seed + 1)
    check_grad("reshape", {"X": [x]}, {"shape": (cols, rows)})
    check_grad("concat", {"X": [x, y]}, {"axis": 1})
    check_grad("split", {"X": [y]}, {"sections": (1, cols), "axis": 1})
    check_grad("sum", {"X": [x, x.copy() * 2]})


@given(vocab=st.integers(2, 6), width=DIMS, rows=DIMS, seed=st.integers(0, 99))
def test_lookup_table(vocab, width, rows, seed):
    w = away_from_zero((vocab, width), seed)
    ids = np.random.default_rng(seed).integers(0, vocab, (rows, 1))
    out = registry.get("lookup_table").compute({"W": [w], "Ids": [ids]}, {}, None, ANYWHERE)
    np.testing.assert_array_equal(out["Out"][0], w[ids[:, 0]])
    check_grad("lookup_table", {"W": [w], "Ids": [ids]}, wrt=["W"])


@given(rows=DIMS, cols=DIMS, seed=st.integers(0, 99))
def test_dropout(rows, cols, seed):
    x = away_from_zero((rows, cols), seed)
    attrs = {"dropout_prob": 0.5, "seed": seed}
    out = registry.get("dropout").compute({"X": [x]}, attrs, None, ANYWHERE)
    kept = out["Mask"][0] != 0
    np.testing.assert_allclose(out["Out"][0][kept], 2 * x[kept])
    assert not out["Out"][0][~kept].any()
    check_grad("dropout", {"X": [x]}, attrs)


@given(n=st.integers(1, 2), c=st.integers(1, 2), size=st.integers(3, 5),
       m=st.integers(1, 2), k=st.integers(1, 3), stride=st.integers(1, 2),
       pad=st.integers(0, 1), seed=st.integers(0, 99))
def test_conv2d(n, c, size, m, k, stride, pad, seed):
    x, f = away_from_zero((n, c, size, size), seed), away_from_zero((m, c, k, k), seed + 1)
    attrs = {"strides": stride, "paddings": pad}
    out = registry.get("conv2d").compute({"Input": [x], "Filter": [f]}, attrs, None,
                                         ANYWHERE)["Output"][0]
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (size + 2 * pad - k) // stride + 1
    expected = np.zeros((n, m, oh, oh))
    for i in range(oh):
        for j in range(oh):
            window = padded[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
            expected[:, :, i, j] = np.tensordot(window, f, axes=([1, 2, 3], [1, 2, 3]))
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    check_grad("conv2d", {"Input": [x], "Filter": [f]}, attrs)


@pytest.mark.parametrize("pooling", ["max", "avg"])
@given(n=st.integers(1, 2), c=st.integers(1, 2), size=st.sampled_from([2, 4]),
       seed=st.integers(0, 99))
def test_pool2d(pooling, n, c, size, seed):
    x = np.random.default_rng(seed).permutation(n * c * size * size).reshape(
        n, c, size, size).astype(np.float64)          # distinct values: max is unique
    attrs = {"ksize": 2, "pooling_type": pooling}
    out = registry.get("pool2d").compute({"X": [x]}, attrs, None, ANYWHERE)["Out"][0]
    blocks = x.reshape(n, c, size // 2, 2, size // 2, 2)
    expected = blocks.max(axis=(3, 5)) if pooling == "max" else blocks.mean(axis=(3, 5))
    np.testing.assert_allclose(out, expected)
    check_grad("pool2d", {"X": [x]}, attrs)


@pytest.mark.parametrize("is_test", [False, True])
@given(n=st.integers(2, 3), c=st.integers(1, 3), seed=st.integers(0, 99))
def test_batch_norm(is_test, n, c, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, c, 2, 2))
    scale, bias = rng.normal(size=c), rng.normal(size=c)
    mean, var = rng.normal(size=c), rng.uniform(0.5, 2, size=c)
    ins = {"X": [x], "Scale": [scale], "Bias": [bias], "Mean": [mean], "Variance": [var]}
    attrs = {"is_test": is_test, "epsilon": 1e-5}
    out = registry.get("batch_norm").compute(ins, attrs, None, ANYWHERE)
    use_mean = mean if is_test else x.mean(axis=(0, 2, 3))
    use_var = var if is_test else x.var(axis=(0, 2, 3))
    expected = scale[None, :, None, None] * (x - use_mean[None, :, None, None]) / np.sqrt(
        use_var[None, :, None, None] + 1e-5) + bias[None, :, None, None]
    np.testing.assert_allclose(out["Y"][0], expected, rtol=1e-12)
    check_grad("batch_norm", ins, attrs, wrt=["X", "Scale", "Bias"], of=["Y"])


@given(rows=st.integers(1, 40), cols=st.integers(1, 40), seed=st.integers(0, 99),
       dtype=st.sampled_from(["float64", "float32"]),
       lr_dtype=st.sampled_from(["float64", "float32"]))
def test_parameter_updates_are_the_textbook_formulas(rows, cols, seed, dtype, lr_dtype):
    """sgd, momentum and adam give, bitwise, the formulas written out in numpy (computed
    in the dtype numpy's promotion gives, then cast to the parameter's), as new arrays:
    the inputs are left as they were (an op reading the old parameter may still run)."""
    rng = np.random.default_rng(seed)
    param, grad, m1, velocity = (rng.normal(size=(rows, cols)).astype(dtype) for _ in range(4))
    m2 = rng.random((rows, cols)).astype(dtype)
    lr = np.array([0.05], lr_dtype)
    b1, b2 = np.array([0.9 ** 3], dtype), np.array([0.999 ** 3], dtype)
    beta1, beta2, epsilon, mu = 0.9, 0.999, 1e-8, 0.8
    ins = {"Param": [param], "Grad": [grad], "LearningRate": [lr], "Velocity": [velocity],
           "Moment1": [m1], "Moment2": [m2], "Beta1Pow": [b1], "Beta2Pow": [b2]}
    before = {slot: [a.copy() for a in arrays] for slot, arrays in ins.items()}
    attrs = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon, "mu": mu}
    new_m1 = beta1 * m1 + (1 - beta1) * grad
    new_m2 = beta2 * m2 + (1 - beta2) * grad * grad
    rate = lr[0] * np.sqrt(1 - b2[0]) / (1 - b1[0])
    new_velocity = mu * velocity + grad
    expected = {
        "sgd": {"ParamOut": param - lr[0] * grad},
        "momentum": {"ParamOut": param - lr[0] * new_velocity, "VelocityOut": new_velocity},
        "adam": {"ParamOut": param - rate * new_m1 / (np.sqrt(new_m2) + epsilon),
                 "Moment1Out": new_m1, "Moment2Out": new_m2,
                 "Beta1PowOut": b1 * beta1, "Beta2PowOut": b2 * beta2}}
    for op_type, outputs in expected.items():
        got = registry.get(op_type).compute(ins, attrs, None, ANYWHERE)
        assert sorted(got) == sorted(outputs), op_type
        for slot, value in outputs.items():
            array = got[slot][0]
            assert array.dtype == np.dtype(dtype), (op_type, slot, array.dtype)
            np.testing.assert_array_equal(array, value.astype(dtype), err_msg=f"{op_type} {slot}")
        for slot, arrays in ins.items():
            np.testing.assert_array_equal(arrays[0], before[slot][0], err_msg=f"{op_type} {slot}")

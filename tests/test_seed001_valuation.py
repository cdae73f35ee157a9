"""Leave-one-out values: the value rule, exact LOO vs brute force, the first-order approximation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_edge.aggregation import WeightedSum, weighted_average
from flower_edge.errors import InputError
from flower_edge.valuation import (
    first_order_contributions,
    leave_one_out_values,
    values_from_contributions,
)


@pytest.mark.parametrize(
    ("contributions", "expected"),
    [
        ([0.1, 0.3], [0.25, 0.75]),  # all positive
        ([0.2, -0.1, 0.6], [0.25, 0.0, 0.75]),  # a negative one is clamped to 0
        ([0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]),  # all zero: equal values
        ([-0.2, -0.1], [0.5, 0.5]),  # all negative: equal values
        ([-0.2, 0.0], [0.5, 0.5]),  # none positive: equal values
        ([0.0, 0.05], [0.0, 1.0]),
        ([0.4], [1.0]),  # single participant
        ([-0.4], [1.0]),
        ([0.0], [1.0]),
    ],
)
def test_value_rule(contributions: list[float], expected: list[float]) -> None:
    values = values_from_contributions(contributions)
    np.testing.assert_allclose(values, expected, rtol=1e-12)
    assert math.fsum(values.tolist()) == pytest.approx(1.0, abs=1e-15)
    assert values.dtype == np.float64


@pytest.mark.parametrize(
    ("contributions", "match"),
    [
        ([], r"contributions must hold at least one participant, got 0"),
        ([0.1, math.nan], r"contributions\[1\] must be a finite number, got nan"),
        ([math.inf], r"contributions\[0\] must be a finite number, got inf"),
        ([0.1, "a"], r"contributions\[1\] must be a finite number, got 'a'"),
    ],
)
def test_value_rule_rejects_bad_contributions(contributions: list[float], match: str) -> None:
    with pytest.raises(InputError, match=match):
        values_from_contributions(contributions)


def test_leave_one_out_values_accuracy_and_loss() -> None:
    contributions, values = leave_one_out_values(0.9, [0.8, 0.95, 0.7])
    np.testing.assert_allclose(contributions, [0.1, -0.05, 0.2], atol=1e-12)
    np.testing.assert_allclose(values, [1 / 3, 0.0, 2 / 3], atol=1e-12)
    contributions, values = leave_one_out_values(0.5, [0.7, 0.4], higher_is_better=False)
    np.testing.assert_allclose(contributions, [0.2, -0.1], atol=1e-12)
    np.testing.assert_allclose(values, [1.0, 0.0])


def test_leave_one_out_values_rejects_bad_metrics() -> None:
    with pytest.raises(InputError, match=r"metric_full\[0\] must be a finite number, got nan"):
        leave_one_out_values(math.nan, [0.1])
    with pytest.raises(InputError, match=r"metrics_without\[2\] must be a finite number"):
        leave_one_out_values(0.5, [0.1, 0.2, math.inf])
    with pytest.raises(InputError, match=r"metrics_without must hold at least one participant"):
        leave_one_out_values(0.5, [])


def _accuracy(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((x @ w > 0) == y))


def test_exact_leave_one_out_equals_brute_force_reaggregation_and_evaluation() -> None:
    rng = np.random.default_rng(3)
    x_test = rng.normal(size=(400, 5))
    truth = rng.normal(size=5)
    y_test = x_test @ truth > 0
    updates = [[(truth + rng.normal(scale=s, size=5)).astype(np.float32)] for s in (0.1, 2, 0.5, 3)]
    weights = [1.0, 2.0, 0.5, 1.5]
    total = WeightedSum(updates[0])
    for i, (u, w) in enumerate(zip(updates, weights, strict=True)):
        total.add(i, u, w)
    full = _accuracy(total.mean()[0], x_test, y_test)
    fast = [_accuracy(m[0], x_test, y_test) for _, m in total.means_without()]
    brute = [
        _accuracy(
            weighted_average(
                [u for j, u in enumerate(updates) if j != i],
                [w for j, w in enumerate(weights) if j != i],
            )[0],
            x_test,
            y_test,
        )
        for i in range(len(updates))
    ]
    assert fast == brute
    contributions, values = leave_one_out_values(full, fast)
    np.testing.assert_allclose(contributions, full - np.asarray(brute))
    assert values.sum() == pytest.approx(1.0)


def _quadratic_case(
    rng: np.random.Generator, k: int
) -> tuple[WeightedSum, np.ndarray, np.ndarray, np.ndarray]:
    n = 6
    m = rng.normal(size=(n, n))
    hessian = m @ m.T + np.eye(n)
    centre = rng.normal(size=n)
    total = WeightedSum([np.zeros(n)])
    base = rng.normal(size=n)
    for i in range(k):
        total.add(i, [base + rng.normal(scale=0.1, size=n)], float(rng.uniform(0.5, 2.0)))
    return total, hessian, centre, base


def test_first_order_is_exact_for_a_linear_loss() -> None:
    rng = np.random.default_rng(5)
    total, _, _, _ = _quadratic_case(rng, 5)
    c = rng.normal(size=6)

    def loss(x: np.ndarray) -> float:
        return float(c @ x)

    xbar = total.mean()[0]
    exact = [loss(total.mean_without(i)[0]) - loss(xbar) for i in total.keys]
    approx = first_order_contributions([c], total)
    np.testing.assert_allclose(approx, exact, rtol=1e-9, atol=1e-12)


def test_first_order_matches_exact_on_a_quadratic_up_to_the_second_order_term() -> None:
    rng = np.random.default_rng(6)
    total, hessian, centre, _ = _quadratic_case(rng, 7)

    def loss(x: np.ndarray) -> float:
        d = x - centre
        return float(0.5 * d @ hessian @ d)

    xbar = total.mean()[0]
    gradient = hessian @ (xbar - centre)
    approx = first_order_contributions([gradient], total)
    for position, key in enumerate(total.keys):
        x_without = total.mean_without(key)[0]
        delta = x_without - xbar
        exact = loss(x_without) - loss(xbar)
        # exact - first order is the second-order term 0.5 d^T H d, computed by hand.
        assert exact - approx[position] == pytest.approx(0.5 * delta @ hessian @ delta, rel=1e-6)
        # and the closed form of d: w_i / (W - w_i) * (xbar - x_i)
        w = total.weights[key]
        np.testing.assert_allclose(
            delta, w / (total.total_weight - w) * (xbar - total.update(key)[0]), rtol=1e-9
        )


def test_first_order_is_close_to_exact_leave_one_out_on_a_small_model() -> None:
    # Six clients take a few SGD steps from the same global model of a small MLP; two of them
    # train on wrong labels. First-order contributions vs exact LOO (K re-evaluations).
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
    ).double()
    teacher = torch.nn.Linear(8, 3).double()

    def data(n: int, wrong: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, 8, dtype=torch.float64)
        y = teacher(x).argmax(dim=1)
        return x, (torch.randint(0, 3, (n,)) if wrong else y)

    x_test, y_test = data(400)
    base = [p.detach().numpy().copy() for p in model.parameters()]

    def set_params(arrays: list[np.ndarray]) -> None:
        with torch.no_grad():
            for p, a in zip(model.parameters(), arrays, strict=True):
                p.copy_(torch.from_numpy(np.asarray(a, dtype=np.float64)))

    def loss_at(arrays: list[np.ndarray], x: torch.Tensor, y: torch.Tensor) -> float:
        set_params(arrays)
        with torch.no_grad():
            return float(torch.nn.functional.cross_entropy(model(x), y))

    def gradient_at(arrays: list[np.ndarray], x: torch.Tensor, y: torch.Tensor) -> list[np.ndarray]:
        set_params(arrays)
        params = list(model.parameters())
        grads = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x), y), params)
        return [g.detach().numpy().copy() for g in grads]

    total = WeightedSum(base)
    for i in range(6):
        x, y = data(64, wrong=i >= 4)
        update = [a.copy() for a in base]
        for _ in range(3):
            update = [u - 0.3 * g for u, g in zip(update, gradient_at(update, x, y), strict=True)]
        total.add(i, update, 1.0 + 0.25 * i)
    xbar = total.mean()
    approx = first_order_contributions(gradient_at(xbar, x_test, y_test), total)
    full = loss_at(xbar, x_test, y_test)
    exact = np.array([loss_at(total.mean_without(k), x_test, y_test) - full for k in total.keys])
    assert np.max(np.abs(approx - exact)) <= 0.1 * np.max(np.abs(exact))
    assert np.corrcoef(approx, exact)[0, 1] > 0.95
    assert (approx[4:] < 0).all()  # the wrong-label clients hurt, and first order sees it


def test_first_order_ignores_integer_layers_and_rejects_bad_inputs() -> None:
    ref = [np.zeros(2), np.array(0, dtype=np.int64)]
    total = WeightedSum(ref)
    total.add("a", [np.array([1.0, 0.0]), np.array(5)], 1.0)
    with pytest.raises(InputError, match=r"leave-one-out needs at least 2 updates, got 1"):
        first_order_contributions([np.ones(2), np.zeros(())], total)
    total.add("b", [np.array([0.0, 1.0]), np.array(9)], 3.0)
    # xbar = (0.25, 0.75); g = (1, 0): c_a = 1/3 * (0.25 - 1) = -0.25, c_b = 3 * 0.25 = 0.75
    got = first_order_contributions([np.array([1.0, 0.0]), np.array(1e9)], total)
    np.testing.assert_allclose(got, [-0.25, 0.75])
    # the integer layer's entry is ignored, whatever it is
    got = first_order_contributions([np.array([1.0, 0.0]), np.array(3, dtype=np.int64)], total)
    np.testing.assert_allclose(got, [-0.25, 0.75])
    with pytest.raises(InputError, match=r"gradient has 1 arrays, expected 2"):
        first_order_contributions([np.ones(2)], total)
    with pytest.raises(InputError, match=r"gradient\[0\] contains NaN or Inf"):
        first_order_contributions([np.array([np.nan, 0.0]), np.zeros(())], total)
    with pytest.raises(InputError, match=r"gradient\[0\] has shape \(3,\), expected \(2,\)"):
        first_order_contributions([np.ones(3), np.zeros(())], total)
    with pytest.raises(InputError, match=r"gradient\[0\] must be a float numpy array, got int64"):
        first_order_contributions([np.ones(2, dtype=np.int64), np.zeros(())], total)


@settings(max_examples=100, deadline=None)
@given(
    contributions=st.lists(
        st.floats(min_value=-1.0, max_value=1.0, allow_nan=False), min_size=1, max_size=20
    )
)
def test_value_rule_against_a_plain_python_reference(contributions: list[float]) -> None:
    positive = [max(c, 0.0) for c in contributions]
    total = math.fsum(positive)
    if total > 0.0:
        want = [p / total for p in positive]
    else:
        want = [1.0 / len(contributions)] * len(contributions)
    values = values_from_contributions(contributions)
    np.testing.assert_allclose(values, want, rtol=1e-12, atol=0.0)
    assert (values >= 0.0).all()
    assert math.fsum(values.tolist()) == pytest.approx(1.0, abs=1e-12)

"""Staleness decays and the baselines' staleness weights, against hand computations."""

from __future__ import annotations

import math
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_edge.errors import ConfigError, InputError
from flower_edge.staleness import (
    DECAY_PARAMS,
    DECAY_RULES,
    DECAYS,
    MIN_DECAY,
    MIXINGS,
    Decay,
    DecayName,
    MixingName,
    decay_table,
    fedasync_mixing,
    fedbuff_weight,
    make_decay,
)


def test_decay_names_are_the_four_of_the_seed() -> None:
    assert DECAYS == ("exponential", "polynomial", "hinge", "constant")


@pytest.mark.parametrize(
    ("name", "a", "b", "delay", "expected"),
    [
        ("exponential", 0.5, 4.0, 0.0, 1.0),
        ("exponential", 0.5, 4.0, 2.0, math.e**-1),  # exp(-0.5 * 2)
        ("exponential", math.log(2.0), 4.0, 3.0, 0.125),  # 2 ** -3
        ("polynomial", 0.5, 4.0, 0.0, 1.0),
        ("polynomial", 0.5, 4.0, 3.0, 0.5),  # (1 + 3) ** -0.5 = 1/2
        ("polynomial", 2.0, 4.0, 1.0, 0.25),  # (1 + 1) ** -2
        ("polynomial", 1.0, 4.0, 9.0, 0.1),  # 1 / 10
        ("hinge", 0.5, 4.0, 0.0, 1.0),
        ("hinge", 0.5, 4.0, 4.0, 1.0),  # dt <= b: no decay
        ("hinge", 0.5, 4.0, 6.0, 0.5),  # 1 / (0.5 * (6 - 4) + 1)
        ("hinge", 2.0, 0.0, 2.0, 0.2),  # 1 / (2 * 2 + 1)
        ("constant", 0.5, 4.0, 0.0, 1.0),
        ("constant", 0.5, 4.0, 1e9, 1.0),
    ],
)
def test_decay_matches_hand_computation(
    name: str, a: float, b: float, delay: float, expected: float
) -> None:
    assert Decay(name, a=a, b=b)(delay) == pytest.approx(expected, rel=1e-12)  # type: ignore[arg-type]
    assert make_decay(name, a=a, b=b)(delay) == pytest.approx(expected, rel=1e-12)


def test_decay_never_reaches_zero() -> None:
    assert Decay("exponential", a=1.0)(1e6) == MIN_DECAY
    assert Decay("polynomial", a=200.0)(1e300) == MIN_DECAY
    assert MIN_DECAY > 0.0


delays = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@st.composite
def decays(draw: st.DrawFn) -> Decay:
    name = draw(st.sampled_from(DECAYS))
    a = draw(st.floats(min_value=1e-3, max_value=10.0))
    b = draw(st.floats(min_value=0.0, max_value=100.0))
    return Decay(name, a=a, b=b)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(decay=decays(), d1=delays, d2=delays)
def test_decay_is_non_increasing_positive_and_one_at_zero(
    decay: Decay, d1: float, d2: float
) -> None:
    lo, hi = sorted((d1, d2))
    assert decay(0.0) == 1.0
    assert 0.0 < decay(hi) <= decay(lo) <= 1.0


@settings(max_examples=100, deadline=None)
@given(decay=decays(), start=st.floats(min_value=0.0, max_value=50.0))
def test_decay_is_strictly_decreasing_past_the_hinge(decay: Decay, start: float) -> None:
    if decay.name == "constant":
        assert decay(start + 1.0) == decay(start)
        return
    lo = max(start, decay.b) if decay.name == "hinge" else start
    assert decay(lo + 1.0) < decay(lo)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "exponential", "a": 0.0}, r"decay parameter a must be > 0, got 0\.0"),
        ({"name": "polynomial", "a": -1.0}, r"decay parameter a must be > 0, got -1\.0"),
        ({"name": "polynomial", "a": math.nan}, r"decay parameter a must be a finite number > 0"),
        ({"name": "hinge", "a": math.inf}, r"decay parameter a must be a finite number > 0"),
        ({"name": "hinge", "a": 1.0, "b": -0.5}, r"decay parameter b must be >= 0, got -0\.5"),
        ({"name": "hinge", "a": "1"}, r"decay parameter a must be a finite number > 0, got '1'"),
        (
            {"name": "linear"},
            r"decay must be one of exponential, .*, got 'linear'",
        ),
    ],
)
def test_bad_decay_settings_raise_config_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Decay(**kwargs)  # type: ignore[arg-type]


def test_constant_decay_ignores_its_unused_parameters() -> None:
    assert Decay("constant", a=-1.0, b=-1.0)(5.0) == 1.0
    assert Decay("exponential", a=1.0, b=-1.0)(0.0) == 1.0  # b is the hinge's only


@pytest.mark.parametrize("delay", [-1.0, -1e-9, math.nan, math.inf])
def test_bad_delays_raise_input_error(delay: float) -> None:
    match = r"delay must be (>= 0|a finite number >= 0), got"
    with pytest.raises(InputError, match=match):
        Decay("polynomial")(delay)
    with pytest.raises(InputError, match=match):
        make_decay(lambda dt: 1.0)(delay)


def test_non_numeric_delay_raises_input_error() -> None:
    with pytest.raises(InputError, match=r"delay must be a finite number >= 0, got '3'"):
        Decay("hinge")("3")  # type: ignore[arg-type]


def test_make_decay_rejects_unknown_names_and_parameters() -> None:
    with pytest.raises(
        ConfigError, match=r"decay must be one of exponential, polynomial, hinge, constant, got"
    ):
        make_decay("cosine")
    with pytest.raises(ConfigError, match=r"unknown decay parameter\(s\) c; allowed: a \(> 0\)"):
        make_decay("hinge", c=1.0)
    with pytest.raises(ConfigError, match=r"decay parameter a must be > 0, got -2\.0"):
        make_decay("exponential", a=-2.0)
    with pytest.raises(ConfigError, match=r"apply only to named decays"):
        make_decay(lambda dt: 1.0, a=1.0)
    with pytest.raises(ConfigError, match=r"decay must be a name in .* or a callable, got int"):
        make_decay(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"cannot be given with a Decay instance"):
        make_decay(Decay("hinge"), a=1.0)


def test_make_decay_returns_a_decay_instance_as_is() -> None:
    decay = Decay("hinge", a=1.0, b=2.0)
    assert make_decay(decay) is decay


def test_make_decay_wraps_a_callable_and_checks_its_results() -> None:
    g = make_decay(lambda dt: 1.0 / (1.0 + dt * dt))
    assert g(0.0) == 1.0
    assert g(3.0) == pytest.approx(0.1)
    with pytest.raises(InputError, match=r"result at delay 2\.0 must be > 0, got 0\.0"):
        make_decay(lambda dt: 0.0)(2.0)
    with pytest.raises(InputError, match=r"result at delay 0\.0 must be > 0, got -1\.0"):
        make_decay(lambda dt: -1.0)(0.0)
    with pytest.raises(InputError, match=r"must be a finite number > 0, got nan"):
        make_decay(lambda dt: math.nan)(1.0)
    with pytest.raises(
        InputError,
        match=r"function's result at delay 1\.0 must be a finite number > 0, got 'x'",
    ):
        make_decay(lambda dt: "x")(1.0)  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize(("staleness", "expected"), [(0, 1.0), (3, 0.5), (8, 1.0 / 3.0), (99, 0.1)])
def test_fedbuff_weight_matches_hand_computation(staleness: int, expected: float) -> None:
    assert fedbuff_weight(staleness) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("alpha", "staleness", "kind", "a", "b", "expected"),
    [
        (0.6, 0, "polynomial", 0.5, 4.0, 0.6),
        (0.6, 3, "polynomial", 0.5, 4.0, 0.3),  # 0.6 * 4 ** -0.5
        (0.8, 4, "hinge", 0.5, 4.0, 0.8),  # within the hinge
        (0.8, 10, "hinge", 0.5, 4.0, 0.2),  # 0.8 / (0.5 * 6 + 1)
        (0.4, 50, "constant", 0.5, 4.0, 0.4),
        (1.0, 1, "polynomial", 1.0, 0.0, 0.5),
    ],
)
def test_fedasync_mixing_matches_hand_computation(
    alpha: float, staleness: int, kind: str, a: float, b: float, expected: float
) -> None:
    assert fedasync_mixing(alpha, staleness, kind, a=a, b=b) == pytest.approx(expected)  # type: ignore[arg-type]


def test_baseline_weights_reject_bad_inputs() -> None:
    with pytest.raises(InputError, match=r"staleness must be an integer >= 0, got -1"):
        fedbuff_weight(-1)
    with pytest.raises(InputError, match=r"staleness must be an integer >= 0, got 1\.5"):
        fedbuff_weight(1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"FedAsync alpha must be in \(0, 1\], got 0"):
        fedasync_mixing(0.0, 1)
    with pytest.raises(ConfigError, match=r"FedAsync alpha must be in \(0, 1\], got 1\.5"):
        fedasync_mixing(1.5, 1)
    with pytest.raises(
        ConfigError,
        match=r"FedAsync staleness function must be one of .*, got 'exponential'",
    ):
        fedasync_mixing(0.5, 1, "exponential")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"decay parameter a must be > 0, got 0\.0"):
        fedasync_mixing(0.5, 1, "hinge", a=0.0)
    with pytest.raises(InputError, match=r"staleness must be an integer >= 0"):
        fedasync_mixing(0.5, -2)


def test_docs_decay_table_is_the_rendered_registry() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "strategy.md").read_text("utf-8")
    start, end = "<!-- decay-table:start -->\n", "\n<!-- decay-table:end -->"
    assert start in text
    assert end in text
    documented = text[text.index(start) + len(start) : text.index(end)]
    assert documented == decay_table()


def test_registry_feeds_names_types_and_table() -> None:
    assert get_args(DecayName) == DECAYS == tuple(DECAY_RULES)
    assert get_args(MixingName) == MIXINGS
    assert set(MIXINGS) == {"constant", "polynomial", "hinge"}
    rows = decay_table().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(DECAYS)
    for rule in DECAY_RULES.values():
        assert set(rule.params) <= set(DECAY_PARAMS)
        assert rule.fn(0.0, 0.5, 4.0) == 1.0  # g(0) = 1 for every registered decay
        assert f"`{rule.formula}`" in decay_table()


@pytest.mark.parametrize("name", DECAYS)
def test_registered_decay_checks_exactly_its_parameters(name: str) -> None:
    rule = DECAY_RULES[name]
    for param in DECAY_PARAMS:
        if param in rule.params:
            with pytest.raises(ConfigError, match=f"decay parameter {param} must be"):
                Decay(name, **{param: -1.0})  # type: ignore[arg-type]
        else:
            Decay(name, **{param: -1.0})  # type: ignore[arg-type]  # unused: not checked


@pytest.mark.parametrize(
    ("spec", "params", "match"),
    [
        ("polynomial", {"b": -1.0}, r"decay parameter b must be >= 0, got -1"),
        ("polynomial", {"b": float("nan")}, r"decay parameter b must be a finite number"),
        ("polynomial", {"b": "x"}, r"decay parameter b must be a finite number"),
        ("constant", {"a": -3.0}, r"decay parameter a must be > 0, got -3"),
    ],
)
def test_every_given_decay_parameter_is_checked(
    spec: str, params: dict[str, object], match: str
) -> None:
    """Found by a new-user probe: a parameter the named decay does not use was not checked
    (``EdgeStrategy(2, decay_b='x')`` printed ``Decay(name='polynomial', a=0.5, b='x')``)."""
    with pytest.raises(ConfigError, match=match):
        make_decay(spec, **params)  # type: ignore[arg-type]


def test_an_unused_decay_parameter_is_named_in_a_warning() -> None:
    from conftest import flwr_logs

    from strategies import EdgeStrategy

    with flwr_logs() as caplog:
        EdgeStrategy(2, decay="constant", decay_a=3.0)
    assert "EdgeStrategy: decay_a is ignored: decay 'constant' does not use it" in caplog.text

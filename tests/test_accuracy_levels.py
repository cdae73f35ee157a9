"""``benchmarks/accuracy_levels.py``: time to every accuracy level from recorded rows."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark

levels_mod = load_benchmark("accuracy_levels")


def _brute_median(times: list[float]) -> float:
    """The median by sorting, never (inf) the longest."""
    s = sorted(times)
    n = len(s)
    if n % 2:
        return s[n // 2]
    lo, hi = s[n // 2 - 1], s[n // 2]
    return math.inf if math.isinf(hi) else (lo + hi) / 2


def _brute_time(curve: list[list[float]], level: float) -> float:
    hits = [t for t, acc in curve if acc >= level]
    return min(hits) if hits else math.inf


def _curve(rng: random.Random) -> list[list[float]]:
    t, acc, out = 0.0, 0.0, []
    for _ in range(rng.randint(1, 12)):
        t += rng.uniform(0.1, 1.0)
        acc = min(1.0, max(0.0, acc + rng.uniform(-0.1, 0.2)))
        out.append([round(t, 3), round(acc, 3)])
    return out


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_level_table_matches_a_brute_force_reference(tmp_path: Path) -> None:
    rng = random.Random(7)
    rows_a: list[dict[str, Any]] = [
        {"label": "a", "seed": s, "curve": _curve(rng)} for s in range(7)
    ]
    rows_b: list[dict[str, Any]] = [
        {"label": "b", "seed": s, "curve": _curve(rng)} for s in range(1, 9)
    ]
    _write(tmp_path / "a.jsonl", rows_a)
    _write(tmp_path / "b.jsonl", rows_b)
    levels = [0.1, 0.3, 0.5, 0.7, 0.9]
    runs = {
        "A": levels_mod.load_rows([("a.jsonl", "a")], tmp_path),
        "B": levels_mod.load_rows([("b.jsonl", "b")], tmp_path),
    }
    seeds, table = levels_mod.level_table(runs, levels)
    assert seeds == list(range(1, 7))  # the seeds both strategies share
    by: dict[str, dict[int, Any]] = {
        "A": {r["seed"]: r for r in rows_a},
        "B": {r["seed"]: r for r in rows_b},
    }
    for level, row in zip(levels, table, strict=True):
        for name in ("A", "B"):
            times = [_brute_time(by[name][s]["curve"], level) for s in seeds]
            assert row["median"][name] == pytest.approx(_brute_median(times))
            assert row["reached"][name] == sum(math.isfinite(t) for t in times)
        a, b = row["median"]["A"], row["median"]["B"]
        if math.isfinite(a) and math.isfinite(b):
            assert row["ratio"] == pytest.approx(a / b)
        else:
            assert row["ratio"] is None


def test_several_files_add_seeds_and_the_first_row_of_a_seed_wins(tmp_path: Path) -> None:
    _write(
        tmp_path / "x.jsonl",
        [
            {"label": "e", "seed": 0, "curve": [[1.0, 0.5]]},
            {"label": "other", "seed": 1, "curve": [[9.0, 0.9]]},
        ],
    )
    _write(
        tmp_path / "y.jsonl",
        [{"label": "e", "seed": 0, "curve": [[5.0, 0.9]]}, {"label": "e", "seed": 1, "curve": []}],
    )
    name, sources = levels_mod.parse_strategy("edge=x.jsonl:e,y.jsonl:e")
    assert name == "edge"
    rows = levels_mod.load_rows(sources, tmp_path)
    assert sorted(rows) == [0]  # seed 1: a row without a curve is no run
    assert rows[0]["curve"] == [[1.0, 0.5]]


@pytest.mark.parametrize("spec", ["edge", "edge=x.jsonl", "=x.jsonl:e", "edge=x.jsonl:e,:e"])
def test_a_malformed_strategy_is_refused_by_name(spec: str) -> None:
    with pytest.raises(ValueError, match="NAME=FILE:LABEL"):
        levels_mod.parse_strategy(spec)


def test_main_prints_never_and_the_ratio(tmp_path: Path, capsys: Any) -> None:
    _write(tmp_path / "r.jsonl", [{"label": "e", "seed": 0, "curve": [[2.0, 0.6]]}])
    _write(tmp_path / "f.jsonl", [{"label": "f", "seed": 0, "curve": [[4.0, 0.5]]}])
    rc = levels_mod.main(
        ["--dir", str(tmp_path), "--levels", "0.5,0.6", "e=r.jsonl:e", "f=f.jsonl:f"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "| 0.5 | 2.00 s (1/1) | 4.00 s (1/1) | 0.50x |" in out
    assert "| 0.6 | 2.00 s (1/1) | never (0/1) | - |" in out


def test_main_names_a_missing_file(tmp_path: Path, capsys: Any) -> None:
    rc = levels_mod.main(["--dir", str(tmp_path), "--levels", "0.5", "e=nope.jsonl:e"])
    assert rc == 2
    assert "nope.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["0.3,x", "0,0.5", "1.5"])
def test_bad_levels_are_refused(text: str) -> None:
    with pytest.raises(SystemExit):
        levels_mod.main(["--levels", text, "e=r.jsonl:e"])

"""A regression gate: is a run significantly worse than an earlier one, question by question?

``selfrag eval ... --baseline previous/`` (the earlier run's folder, its ``summary.json``
or its ``results.jsonl``) compares every contender both runs have, on every quality metric
both measured, over the questions both answered (matched by id), by the paired bootstrap
the report uses. A metric **regresses** only when its whole 95% interval is on the worse
side of zero, so noise passes and a real drop fails; the command then exits 1. From your
own tests::

    from selfrag_core.evaluation import assert_no_regression
    assert_no_regression("eval-results/today", "eval-results/last-release")
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.metrics import PairedDifference, paired_difference
from selfrag_core.evaluation.report import EvalReport, load_results

#: metrics compared by the gate when a run's summary does not list them (lower is better for these)
LOWER_IS_BETTER = frozenset({"unsupported"})


@dataclass(frozen=True)
class Comparison:
    """One contender's metric, this run against the baseline run, over ``n`` shared questions."""

    contender: str
    metric: str
    difference: PairedDifference

    @property
    def regressed(self) -> bool:
        return self.difference.verdict == "worse"

    def line(self) -> str:
        d = self.difference
        return (
            f"{self.contender:<12} {self.metric:<16} {d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] "
            f"n={d.n} {d.verdict}"
        )


def _results_file(run: str | os.PathLike[str]) -> Path:
    path = Path(run)
    if path.is_dir():
        path = path / "results.jsonl"
    elif path.name == "summary.json":
        path = path.with_name("results.jsonl")
    if not path.is_file():
        raise ConfigurationError(
            f"no results.jsonl at {path}: give the earlier run's folder (the --out of that selfrag eval), "
            "its summary.json or its results.jsonl"
        )
    return path


def _higher_is_better(results: Path) -> dict[str, bool]:
    summary = results.with_name("summary.json")
    try:
        metrics = json.loads(summary.read_text(encoding="utf-8")).get("metrics", [])
        return {m["name"]: bool(m["higher_is_better"]) for m in metrics}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _per_question(results: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """``{question id: {contender: its metrics}}`` of a run's ``results.jsonl``."""
    try:
        lines = load_results(results)
    except (OSError, ValueError) as e:
        raise ConfigurationError(
            f"cannot read {results}: {e}; give a results.jsonl that selfrag eval wrote"
        ) from e
    return {
        str(line["id"]): {name: dict(record.get("metrics") or {}) for name, record in line["results"].items()}
        for line in lines
        if isinstance(line, dict) and "id" in line and isinstance(line.get("results"), dict)
    }


def compare_runs(
    current: EvalReport | str | os.PathLike[str], baseline: str | os.PathLike[str], *, seed: int = 0
) -> list[Comparison]:
    """Every (contender, metric) both runs measured, ``current`` minus ``baseline`` over the
    questions both answered, with its paired 95% interval and verdict."""
    base_file = _results_file(baseline)
    base = _per_question(base_file)
    directions = _higher_is_better(base_file)
    if isinstance(current, EvalReport):
        directions.update({m.name: m.higher_is_better for m in current.metrics})
        now = {
            q.id: {name: dict(rec.get("metrics") or {}) for name, rec in (results or {}).items()}
            for q, results in zip(current.questions, current.results, strict=True)
            if results
        }
    else:
        current_file = _results_file(current)
        directions = {**directions, **_higher_is_better(current_file)}
        now = _per_question(current_file)
    shared = [qid for qid in now if qid in base]
    contenders = sorted({c for qid in shared for c in now[qid]} & {c for qid in shared for c in base[qid]})
    comparisons = []
    for contender in contenders:
        metrics = sorted(
            {m for qid in shared for m in now[qid].get(contender, {})}
            & {m for qid in shared for m in base[qid].get(contender, {})}
        )
        for metric in metrics:
            higher = directions.get(metric, metric not in LOWER_IS_BETTER)
            ours = [now[q].get(contender, {}).get(metric) for q in shared]
            theirs = [base[q].get(contender, {}).get(metric) for q in shared]
            difference = paired_difference(
                [_number(v) for v in ours], [_number(v) for v in theirs], higher_is_better=higher, seed=seed
            )
            if difference is not None:
                comparisons.append(Comparison(contender, metric, difference))
    return comparisons


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def regressions(comparisons: list[Comparison]) -> list[Comparison]:
    """The comparisons whose interval lies entirely on the worse side of zero."""
    return [c for c in comparisons if c.regressed]


def gate_report(comparisons: list[Comparison]) -> str:
    """The comparisons as lines, the regressions first."""
    worse = regressions(comparisons)
    head = f"against the baseline run: {len(worse)} regression(s) in {len(comparisons)} comparison(s)"
    return "\n".join([head, *(c.line() for c in worse), *(c.line() for c in comparisons if not c.regressed)])


def assert_no_regression(
    current: EvalReport | str | os.PathLike[str], baseline: str | os.PathLike[str], *, seed: int = 0
) -> list[Comparison]:
    """Raise AssertionError (with the comparisons' table) when any metric of ``current``
    is significantly worse than in ``baseline``; return the comparisons otherwise. For a
    user's own tests (pytest shows the message)."""
    comparisons = compare_runs(current, baseline, seed=seed)
    if regressions(comparisons):
        raise AssertionError(gate_report(comparisons))
    return comparisons

"""A regression gate: is a run significantly worse than an earlier one, question by question?

``selfrag eval ... --baseline previous/`` (the earlier run's folder, its ``summary.json``
or its ``results.jsonl``) compares every contender both runs have, on every quality metric
both measured, over the questions both answered (matched by id), by the paired bootstrap
the report uses. A metric **regresses** only when its whole 95% interval is on the worse
side of zero, so noise passes and a real drop fails; the command then exits 1. From your
own tests::

    from selfrag_core.evaluation import assert_no_regression
    assert_no_regression("eval-results/today", "eval-results/last-release")

A gate that cannot judge fails too, with a :class:`ConfigurationError` (the command exits
2) saying what to do: a baseline that cannot be read (a line or a ``summary.json`` that
``selfrag eval`` would not have written: the file and line are named), an empty one, one
that answered fewer than :data:`MIN_SHARED` of the run's questions, or one with no
(contender, metric) in common with the run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.data import _clip, _is_id, _json_problem, _json_type, _kind, _read_text
from selfrag_core.evaluation.metrics import PairedDifference, paired_difference
from selfrag_core.evaluation.report import EvalReport
from selfrag_core.parsing import load_json

#: metrics compared by the gate when a run's summary does not list them (lower is better for these)
LOWER_IS_BETTER = frozenset({"unsupported"})
#: the gate judges only when the baseline answered at least this share of the run's questions
MIN_SHARED = 0.5
#: what a results.jsonl holds, for the messages about one that does not
_RESULT_LINES = 'a JSON object a line, {"id": ..., "results": {contender: {"metrics": {...}, ...}}}'


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


@dataclass(frozen=True)
class SavedRun:
    """A run read back from its files: ``path`` (its ``results.jsonl``), ``questions``
    (``{question id: {contender: its record}}``) and, from its ``summary.json`` when it has
    one, whether each metric is better higher."""

    path: Path
    questions: dict[str, dict[str, dict[str, Any]]]
    higher_is_better: dict[str, bool]


def read_run(run: str | os.PathLike[str]) -> SavedRun:
    """The run in a folder (the ``--out`` of a ``selfrag eval``), its ``summary.json`` or
    its ``results.jsonl``; a ConfigurationError naming the file (and line) when it is
    missing, empty or not what ``selfrag eval`` writes."""
    path = _results_file(run)
    questions = load_results(path)
    if not questions:
        raise ConfigurationError(
            f"{path}: holds no results, so there is nothing to compare with; give the --out folder of a "
            "selfrag eval run that answered questions"
        )
    return SavedRun(path, questions, _higher_is_better(path.with_name("summary.json")))


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


def load_results(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """``{question id: {contender: its record}}`` of a ``results.jsonl`` (to read a run
    back, or what an interrupted one kept). A line ``selfrag eval`` would not have written
    (not JSON, nested too deeply, a field of the wrong type) is a ConfigurationError naming
    the file, the line and what to do."""
    results = {}
    for number, text in enumerate(_read_text(path).split("\n"), start=1):
        if text.strip():
            qid, records = _result_line(text, f"{path}:{number}")
            results[qid] = records
    return results


def _result_line(text: str, where: str) -> tuple[str, dict[str, dict[str, Any]]]:
    def bad(what: str) -> ConfigurationError:
        return ConfigurationError(
            f"{where}: {what}; give the results.jsonl selfrag eval wrote ({_RESULT_LINES})"
        )

    try:
        line = load_json(text)
    except ValueError as e:
        raise bad(f"not valid JSON ({_json_problem(e)})") from e
    if not isinstance(line, dict):
        raise bad(f"a JSON {_json_type(line)}, not an object")
    if not _is_id(line.get("id")):
        raise bad(f'field "id" is {_kind(line, "id")}, not a question id')
    records = line.get("results")
    if not isinstance(records, dict):
        raise bad(f'field "results" is {_kind(line, "results")}, not an object')
    for name, record in records.items():
        if not isinstance(record, dict):
            raise bad(f"results.{_clip(name)} is a JSON {_json_type(record)}, not an object")
        if not isinstance(record.get("metrics") or {}, dict):
            raise bad(f"results.{_clip(name)}.metrics is {_kind(record, 'metrics')}, not an object")
    return str(line["id"]), records


def _higher_is_better(summary: Path) -> dict[str, bool]:
    """``{metric: whether higher is better}`` from a run's ``summary.json``; ``{}`` without one."""
    if not summary.is_file():
        return {}

    def bad(what: str) -> ConfigurationError:
        return ConfigurationError(
            f"{summary}: {what}; give the summary.json selfrag eval wrote, or delete it (every metric "
            f"but {', '.join(sorted(LOWER_IS_BETTER))} is then taken as better higher)"
        )

    text = _read_text(summary)  # unreadable or not UTF-8: a ConfigurationError saying so
    try:
        data = load_json(text)
    except ValueError as e:
        raise bad(f"not valid JSON ({_json_problem(e, at_line=True)})") from e
    if not isinstance(data, dict):
        raise bad(f"a JSON {_json_type(data)}, not an object")
    metrics = data.get("metrics", [])
    if not isinstance(metrics, list):
        raise bad(f'"metrics" is a JSON {_json_type(metrics)}, not a list')
    directions = {}
    for i, metric in enumerate(metrics):
        if not (
            isinstance(metric, dict)
            and isinstance(metric.get("name"), str)
            and isinstance(metric.get("higher_is_better"), bool)
        ):
            raise bad(f'metrics[{i}] is not an object with a "name" and a true or false "higher_is_better"')
        directions[metric["name"]] = metric["higher_is_better"]
    return directions


def compare_runs(
    current: EvalReport | str | os.PathLike[str],
    baseline: SavedRun | str | os.PathLike[str],
    *,
    seed: int = 0,
) -> list[Comparison]:
    """Every (contender, metric) both runs measured, ``current`` minus ``baseline`` over the
    questions both answered, with its paired 95% interval and verdict. ``baseline``: a run's
    folder or file, or a :func:`read_run` of one. Raises ConfigurationError when a run
    cannot be read or the comparison would judge nothing: the baseline answered fewer than
    :data:`MIN_SHARED` of ``current``'s questions, or no (contender, metric) is in both."""
    base = baseline if isinstance(baseline, SavedRun) else read_run(baseline)
    directions, now = _current_run(current, base)
    shared = [qid for qid in now if qid in base.questions]
    if not shared or len(shared) < MIN_SHARED * len(now):
        raise ConfigurationError(
            f"the baseline {base.path} answered {len(shared)} of this run's {len(now)} question(s) (matched "
            f"by id); the gate judges only when at least {MIN_SHARED:.0%} are in common: run the baseline "
            "on the same questions (the same file, --limit, --offset and --seed)"
        )
    ours = {q: {c: dict(r.get("metrics") or {}) for c, r in now[q].items()} for q in shared}
    theirs = {q: {c: dict(r.get("metrics") or {}) for c, r in base.questions[q].items()} for q in shared}
    comparisons = []
    for contender in sorted({c for q in shared for c in ours[q]} & {c for q in shared for c in theirs[q]}):
        comparisons += _compare_contender(contender, shared, ours, theirs, directions, seed)
    if not comparisons:
        raise ConfigurationError(
            f"the baseline {base.path} and this run measured no contender on the same metric over their "
            f"{len(shared)} shared question(s) (the baseline's contenders: {_names(theirs)}; this run's: "
            f"{_names(ours)}): run both with the same --strategies"
        )
    return comparisons


def _current_run(
    current: EvalReport | str | os.PathLike[str], base: SavedRun
) -> tuple[dict[str, bool], dict[str, dict[str, dict[str, Any]]]]:
    """The run compared with ``base``: which way each metric is better (the run's word over
    the baseline's), and its answered questions' records by question id."""
    if isinstance(current, EvalReport):
        directions = {**base.higher_is_better, **{m.name: m.higher_is_better for m in current.metrics}}
        now = {
            q.id: dict(results)
            for q, results in zip(current.questions, current.results, strict=True)
            if results
        }
        return directions, now
    run = read_run(current)
    return {**base.higher_is_better, **run.higher_is_better}, run.questions


def _compare_contender(
    contender: str,
    shared: list[str],
    ours: dict[str, dict[str, dict[str, Any]]],
    theirs: dict[str, dict[str, dict[str, Any]]],
    directions: Mapping[str, bool],
    seed: int,
) -> list[Comparison]:
    """One contender's comparisons over the ``shared`` questions: each metric both runs
    measured it on, where the paired difference has something to judge."""
    metrics = sorted(
        {m for q in shared for m in ours[q].get(contender, {})}
        & {m for q in shared for m in theirs[q].get(contender, {})}
    )
    comparisons = []
    for metric in metrics:
        higher = directions.get(metric, metric not in LOWER_IS_BETTER)
        difference = paired_difference(
            [_number(ours[q].get(contender, {}).get(metric)) for q in shared],
            [_number(theirs[q].get(contender, {}).get(metric)) for q in shared],
            higher_is_better=higher,
            seed=seed,
        )
        if difference is not None:
            comparisons.append(Comparison(contender, metric, difference))
    return comparisons


def _names(run: dict[str, dict[str, dict[str, Any]]]) -> str:
    return ", ".join(sorted({_clip(c) for records in run.values() for c in records})) or "none"


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


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

"""How to read the figures of a run, for the terminal table (:mod:`.report`) and the HTML
page (:mod:`.html`) alike: the metrics that cannot tell the contenders apart
(:func:`metric_spread`), the conditions latency was measured under (:func:`under_load`)
and the notes a reader must see (:func:`reading_notes`). Below both: it imports neither."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["BUSY_LOAD", "metric_spread", "reading_notes", "summary_mean", "under_load"]

#: a load average from this share of the CPUs up, before the run, is a busy machine
BUSY_LOAD = 0.5


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _fmt(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def metric_spread(values: Mapping[str, Sequence[float | None]]) -> str | None:
    """Whether a metric can tell the contenders apart, from each contender's per-question
    values: ``"constant"`` when every answer of every contender scored the same (a metric
    that measures nothing here), ``"identical"`` when every contender scored the same on
    every question (two or more contenders), else None (also when nothing was scored)."""
    rows = [list(v) for v in values.values()]
    known = [x for row in rows for x in row if x is not None]
    if not known:
        return None
    if max(known) == min(known):
        return "constant"
    if len(rows) > 1 and all(len(set(column)) == 1 for column in zip(*rows, strict=True)):
        return "identical"
    return None


def summary_mean(summary: Mapping[str, Any], metric: str) -> float | None:
    """The first mean of ``metric`` among the contenders' summaries (the one they share)."""
    means = (_finite(((s or {}).get("metrics") or {}).get(metric, {}).get("mean")) for s in summary.values())
    return next((m for m in means if m is not None), None)


def under_load(settings: Mapping[str, Any], machine: Mapping[str, Any] | None) -> list[str]:
    """Why the latencies of a run include more than each contender's own work (none: they
    do not): questions run concurrently, or a machine busy before the run started."""
    machine = machine or {}
    reasons = []
    concurrency = machine.get("concurrency", settings.get("concurrency"))
    if isinstance(concurrency, int) and concurrency > 1:
        reasons.append(f"{concurrency} questions ran at a time, so a latency includes waiting for the others")
    load, cpus = _finite(machine.get("load_before")), machine.get("cpus")
    if load is not None and isinstance(cpus, int) and cpus > 0 and load >= BUSY_LOAD * cpus:
        reasons.append(f"the machine was busy before the run (load average {load:.2f} on {cpus} CPUs)")
    return reasons


def reading_notes(
    settings: Mapping[str, Any],
    machine: Mapping[str, Any] | None,
    cache: Mapping[str, Any] | None,
    counts: Mapping[str, tuple[Any, Any, Any]],
    spreads: Mapping[str, tuple[str, float | None, bool]],
) -> list[str]:
    """The notes of a report (:meth:`EvalReport.notes`; the HTML page shows the same):
    ``counts`` per contender (questions whose latency was measured, questions, no answers),
    ``spreads`` per metric label (:func:`metric_spread`'s kind, the mean, higher is better)."""
    notes = []
    loaded = under_load(settings, machine)
    if loaded:
        notes.append(f"latency measured under load: {'; '.join(loaded)}. Read latency differences as hints")
    partial = {name: c for name, c in counts.items() if isinstance(c[0], int) and c[0] < (c[1] or 0)}
    if partial:
        shown = ", ".join(f"{name} {c[0]} of {c[1]}" for name, c in partial.items())
        where = "the cache" if cache is None or not cache.get("shared_replies") else "the shared replies"
        notes.append(
            f"latency counts only the questions where a contender made every LLM call itself, none "
            f"replayed or borrowed from {where} (that time is not the model's): {shown} question(s); "
            "a latency difference uses the questions both measured, and none is given without one"
        )
    notes += _spread_notes(spreads)
    empty = {name: c for name, c in counts.items() if c[2]}
    if empty:
        shown = ", ".join(f"{name} {c[2]} of {c[1]}" for name, c in empty.items())
        notes.append(f"no answer (an error or the failure placeholder, scored 0): {shown}")
    return notes


def _spread_notes(spreads: Mapping[str, tuple[str, float | None, bool]]) -> list[str]:
    """The notes on the metrics that cannot tell the contenders apart: the same score for
    every answer (0 on one where higher is better: the metric does not fit the data), or the
    same for every contender on every question."""
    notes = []
    constant = {label: mean for label, (kind, mean, _) in spreads.items() if kind == "constant"}
    if constant:  # 0 on a higher-is-better metric: the worst score for every answer
        zero = [
            label for label, (kind, mean, up) in spreads.items() if kind == "constant" and up and mean == 0
        ]
        notes.append(
            "the same score for every answer of every contender, so it cannot tell them apart (check that "
            f"it suits the data): {', '.join(f'{label} {_fmt(mean)}' for label, mean in constant.items())}"
            + (
                f"; 0 for every answer ({', '.join(zero)}) usually means the metric does not fit the "
                "data (a long gold passage, say, never occurs whole in an answer)"
                if zero
                else ""
            )
        )
    same = [f"{label} {_fmt(mean)}" for label, (kind, mean, _) in spreads.items() if kind == "identical"]
    if same:
        notes.append(f"the same for every contender on every question: {', '.join(same)}")
    return notes

"""The result of an evaluation: per-question records, per-contender summaries, paired
comparisons with the baseline, as plain data (``to_dict``, the ``selfrag.eval/1``
schema), a terminal table, and files (``summary.json``, ``report.html``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from selfrag_core.errors import MissingDependencyError
from selfrag_core.evaluation.data import EvalQuestion, InputProblem
from selfrag_core.evaluation.html import write_html
from selfrag_core.evaluation.metrics import auroc, mean_interval, paired_difference, percentile
from selfrag_core.evaluation.reading import (
    _finite,
    _fmt,
    metric_spread,
    reading_notes,
    summary_mean,
    under_load,
)

#: the version of the JSON shape of a report (``EvalReport.to_dict``)
EVAL_SCHEMA = "selfrag.eval/1"
#: what a question costs, compared with the baseline like the quality metrics (lower is better)
COSTS = ("llm_calls", "input_tokens", "output_tokens", "latency_s")


@dataclass(frozen=True)
class MetricInfo:
    name: str
    label: str
    higher_is_better: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "higher_is_better": self.higher_is_better}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _known(values: list[Any]) -> list[float]:
    return [v for v in map(_finite, values) if v is not None]


@dataclass
class EvalReport:
    """Every contender's record on every question (``results[i][contender]``, None
    for a question that did not run) and what follows from them."""

    name: str
    settings: dict[str, Any]
    baseline: str
    contenders: list[str]
    metrics: list[MetricInfo]
    questions: list[EvalQuestion]
    results: list[dict[str, dict[str, Any]] | None] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    interrupted: bool = False
    cache: dict[str, Any] | None = None
    #: the conditions latency was measured under: CPUs, load average before and after, concurrency
    machine: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))

    def __post_init__(self) -> None:
        if not self.results:
            self.results = [None] * len(self.questions)

    # ------------------------------------------------------------------ the numbers
    def values(self, contender: str, metric: str) -> list[float | None]:
        """Per question (None where unknown or not run): a metric or a cost."""
        records = ((results or {}).get(contender) for results in self.results)
        return [
            None if rec is None else _finite(rec[metric] if metric in COSTS else rec["metrics"].get(metric))
            for rec in records
        ]

    def latencies(self, contender: str) -> list[float | None]:
        """Per question, the latency of a contender that made every LLM call itself (None
        where a reply was replayed or borrowed from the cache: that time is not the model's)."""
        records = ((results or {}).get(contender) for results in self.results)
        return [
            None if rec is None or rec.get("replayed_calls") else _finite(rec["latency_s"]) for rec in records
        ]

    def _records(self, contender: str) -> list[dict[str, Any]]:
        return [r[contender] for r in self.results if r is not None and contender in r]

    def spreads(self) -> dict[str, str]:
        """The metrics that cannot tell the contenders apart (:func:`metric_spread`)."""
        spread = {
            m.name: metric_spread({c: self.values(c, m.name) for c in self.contenders}) for m in self.metrics
        }
        return {name: kind for name, kind in spread.items() if kind}

    def notes(self) -> list[str]:
        """What a reader must know to trust the figures: latency measured under load or
        replayed, metrics that cannot tell the contenders apart, answers that are none."""
        summary, spreads = self.summary(), self.spreads()
        return reading_notes(
            self.settings,
            self.machine,
            self.cache,
            {name: (s["latency_measured"], s["questions"], s["no_answers"]) for name, s in summary.items()},
            {
                m.label: (spreads[m.name], summary_mean(summary, m.name), m.higher_is_better)
                for m in self.metrics
                if m.name in spreads
            },
        )

    def summary(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name in self.contenders:
            records = self._records(name)
            known = {m.name: _known(self.values(name, m.name)) for m in self.metrics}
            metrics = {m: {"mean": _rounded(_mean(v)), "n": len(v)} for m, v in known.items() if v}
            latency = _known(self.latencies(name))
            intervals = {
                m: mean_interval(self.values(name, m), seed=int(self.settings.get("seed") or 0))
                for m in metrics
            }
            out[name] = {
                "metrics": metrics,
                # the 95% bootstrap interval of each mean
                "intervals": {
                    m: {"low": _rounded(i[0]), "high": _rounded(i[1])} for m, i in intervals.items() if i
                },
                **{
                    cost: _rounded(_mean(_known([r[cost] for r in records])))
                    for cost in ("llm_calls", "input_tokens", "output_tokens")
                },
                # of the questions where the contender made every LLM call itself
                "latency_p50": _rounded(percentile(latency, 50)),
                "latency_p95": _rounded(percentile(latency, 95)),
                "latency_measured": len(latency),
                "no_answers": sum(1 for r in records if r.get("no_answer") or r["error"]),
                "fallbacks": sum(len(r["fallbacks"] or []) for r in records),
                "errors": sum(1 for r in records if r["error"]),
                "questions": len(records),
                "verifier": self.verifier(name),
            }
        return out

    def verifier(self, contender: str) -> dict[str, Any] | None:
        """How far the support check can be trusted on this contender's answers (None
        without gold answers): the AUROC of the verifier's score predicting "a gold answer
        is in the answer", and the mean F1 of the answers it certifies and of those it
        flags (``unsupported``); when the verifier carries fitted checks of its own
        (``support_probability`` scored), the AUROC of its answers' ``.probability`` too
        (``auroc_probability``)."""
        rows = [
            (score, gold, f1, flagged)
            for score, gold, f1, flagged in zip(
                self.values(contender, "support_score"),
                self.values(contender, "gold_in_answer"),
                self.values(contender, "f1"),
                self.values(contender, "unsupported"),
                strict=True,
            )
            if score is not None and gold is not None and f1 is not None and flagged is not None
        ]
        if not rows:
            return None
        certified = [f1 for _, _, f1, flagged in rows if not flagged]
        rejected = [f1 for _, _, f1, flagged in rows if flagged]
        figures = {
            "auroc": _rounded(auroc([r[0] for r in rows], [r[1] > 0 for r in rows])),
            "certified": len(certified),
            "flagged": len(rejected),
            "f1_certified": _rounded(_mean(certified)),
            "f1_flagged": _rounded(_mean(rejected)),
        }
        golds = self.values(contender, "gold_in_answer")
        pairs = zip(self.values(contender, "support_probability"), golds, strict=True)
        known = [(p, gold > 0) for p, gold in pairs if p is not None and gold is not None]
        if known:
            figures["auroc_probability"] = _rounded(auroc([p for p, _ in known], [y for _, y in known]))
        return figures

    def comparisons(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Each contender against the baseline, per metric and cost: the paired
        difference (contender - baseline) with its bootstrap 95% interval and verdict."""
        seed = int(self.settings.get("seed") or 0)
        kinds = [(m.name, m.higher_is_better) for m in self.metrics] + [(c, False) for c in COSTS]

        def series(contender: str, metric: str) -> list[float | None]:
            # latency: only where the contender made every LLM call itself
            return self.latencies(contender) if metric == "latency_s" else self.values(contender, metric)

        baseline = {metric: series(self.baseline, metric) for metric, _ in kinds}
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for name in (c for c in self.contenders if c != self.baseline):
            diffs = {
                metric: paired_difference(
                    series(name, metric), baseline[metric], higher_is_better=higher, seed=seed
                )
                for metric, higher in kinds
            }
            out[name] = {metric: d.to_dict() for metric, d in diffs.items() if d is not None}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": EVAL_SCHEMA,
            "name": self.name,
            "created": self.created,
            "settings": dict(self.settings),
            "baseline": self.baseline,
            "contenders": list(self.contenders),
            "metrics": [m.to_dict() for m in self.metrics],
            "summary": self.summary(),
            "comparisons": self.comparisons(),
            "questions": [
                {
                    "id": q.id,
                    "question": q.question,
                    "answers": list(q.answers),
                    "relevant": sorted(k for k, v in q.relevant.items() if v > 0),
                    "results": results or {},
                }
                for q, results in zip(self.questions, self.results, strict=True)
            ],
            "problems": [{"where": p.where, "message": p.message} for p in self.problems],
            "interrupted": self.interrupted,
            "cache": self.cache,
            "machine": dict(self.machine),
            "notes": self.notes(),
        }

    # ------------------------------------------------------------------ output
    def table(self) -> str:
        """The summary and the comparisons as plain-text tables."""
        summary, comparisons = self.summary(), self.comparisons()
        metric_names = [m.name for m in self.metrics]
        rows = self._summary_rows(summary, metric_names)
        lines = [f"{self.name}: {len(self.questions)} question(s), baseline {self.baseline}", *_grid(rows)]
        compared = self._comparison_rows(comparisons, metric_names)
        if len(compared) > 1:
            lines += ["", *_grid(compared)]
        checked = [(name, summary[name]["verifier"]) for name in self.contenders if summary[name]["verifier"]]
        if checked:
            own = any("auroc_probability" in v for _, v in checked)  # a verifier with checks of its own
            rows = [["the support check", "AUROC (gold in answer)", "certified: n, F1", "flagged: n, F1"]]
            rows[0] += ["AUROC of .probability"] if own else []
            rows += [
                [
                    name,
                    _fmt(v["auroc"]),
                    f"{v['certified']}, {_fmt(v['f1_certified'])}",
                    f"{v['flagged']}, {_fmt(v['f1_flagged'])}",
                    *([_fmt(v.get("auroc_probability"))] if own else []),
                ]
                for name, v in checked
            ]
            lines += ["", *_grid(rows)]
        return "\n".join(lines + self._table_notes())

    def _summary_rows(self, summary: dict[str, Any], metric_names: list[str]) -> list[list[str]]:
        """The summary table: a row a contender, its metrics' means, calls, tokens, latency
        and failures, under a header row."""
        head = ["contender", *metric_names, "calls/q", "tokens/q", "p50 s", "p95 s", "fallbacks", "errors"]
        rows = [head]
        for name in self.contenders:
            s = summary[name]
            tokens = None if s["input_tokens"] is None else s["input_tokens"] + (s["output_tokens"] or 0)
            rows.append([
                name,
                *[_fmt(s["metrics"].get(m, {}).get("mean")) for m in metric_names],
                _fmt(s["llm_calls"], 1), _fmt(tokens, 0),
                _fmt(s["latency_p50"], 1), _fmt(s["latency_p95"], 1), str(s["fallbacks"]), str(s["errors"]),
            ])  # fmt: skip
        return rows

    def _comparison_rows(self, comparisons: dict[str, Any], metric_names: list[str]) -> list[list[str]]:
        """The comparisons with the baseline, a row a (contender, metric) shown, under a header row."""
        compared = [["vs " + self.baseline, "metric", "difference", "95% interval", "n", "verdict"]]
        # the token counts are in the JSON; a metric that cannot tell the contenders apart is in the notes
        shown = {*metric_names, "llm_calls", "latency_s"} - set(self.spreads())
        loaded = " (under load)" if under_load(self.settings, self.machine) else ""
        compared += [
            [
                name,
                metric,
                f"{d['mean']:+.3f}",
                f"[{d['low']:+.3f}, {d['high']:+.3f}]",
                str(d["n"]),
                d["verdict"] + (loaded if metric == "latency_s" else ""),
            ]
            for name, diffs in comparisons.items()
            for metric, d in diffs.items()
            if metric in shown
        ]
        return compared

    def _table_notes(self) -> list[str]:
        """The lines under the tables: the input's problems, the replayed and shared replies,
        an interruption, and the notes."""
        lines: list[str] = []
        if self.problems:
            lines += ["", f"{len(self.problems)} problem(s):", *[f"  {p}" for p in self.problems[:20]]]
        if self.cache and self.cache.get("hits"):
            lines += [
                "",
                f"{self.cache['hits']} LLM call(s) replayed from the cache: their latency is not the model's",
            ]
        if self.cache and self.cache.get("shared_replies"):
            made = ", ".join(
                f"{name} {counts['misses']} of {counts['hits'] + counts['misses']}"
                for name, counts in (self.cache.get("contenders") or {}).items()
            )
            lines += [
                *([] if self.cache.get("hits") else [""]),
                "shared replies: one reply a prompt for every contender; a contender's latency counts "
                "only the model calls it made itself",
                f"  calls the model answered: {made}",
            ]
        if self.interrupted:
            lines += ["", "interrupted: the figures cover the questions that finished"]
        notes = self.notes()
        if notes:
            lines += ["", "notes:", *(f"  - {note}" for note in notes)]
        return lines

    def write(self, directory: Path) -> dict[str, Path]:
        """``summary.json`` and, when matplotlib is installed, ``report.html`` in
        ``directory`` (``results.jsonl`` is written while the evaluation runs)."""
        directory.mkdir(parents=True, exist_ok=True)
        data = self.to_dict()
        written = {"summary": directory / "summary.json"}
        summary = {key: value for key, value in data.items() if key != "questions"}
        written["summary"].write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
        try:
            written["html"] = write_html(data, directory / "report.html")
        except MissingDependencyError as e:
            self.problems.append(InputProblem("report.html", str(e)))
        return written


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _grid(rows: list[list[str]]) -> list[str]:
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    return [
        "  ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))])
        for row in rows
    ]

"""The self-contained HTML page of ``selfrag eval``.

:func:`render_html` turns the JSON summary of an evaluation (schema ``selfrag.eval/1``) into one
HTML page that needs nothing else: every plot is drawn by matplotlib (imported lazily; the
``[eval]`` extra) as SVG and inlined, the CSS is inline, there is no script and no network
reference, and the per-question view uses ``<details>`` so it works with JavaScript disabled.
Every string from the report (answers, documents, names) is escaped. The output is deterministic:
the same report gives byte-identical pages.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from selfrag_core.errors import MissingDependencyError
from selfrag_core.evaluation.reading import metric_spread, reading_notes, under_load

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["pareto_front", "render_html", "write_html"]

_NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_EVENT_COLOURS = {"llm": "#4c72b0", "retrieval": "#dd8452", "other": "#9a9a9a"}
_VERDICT_CLASS = {"better": "v-better", "worse": "v-worse"}
_COSTS = (("llm_calls", "LLM calls per question"), ("latency_p50", "latency p50 (s)"))
_COLUMNS = (  # summary table: header, key, digits
    ("LLM calls", "llm_calls", 2),
    ("tokens in", "input_tokens", 0),
    ("tokens out", "output_tokens", 0),
    ("latency p50 s", "latency_p50", 2),
    ("p95 s", "latency_p95", 2),
    ("measured", "latency_measured", 0),
    ("fallbacks", "fallbacks", 0),
    ("errors", "errors", 0),
    ("no answer", "no_answers", 0),
    ("questions", "questions", 0),
)
_ID_REF = re.compile(r'(\bid="|href="#|url\(#)([^")]+)')
_CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.25em .5em;
vertical-align:top;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.summary th,table.differences th{font-weight:600;font-size:.92em}.ci{color:#555;font-size:.9em}
.v-better{color:#1a7f37}.v-worse{color:#b42318}.v-none{color:#666}
.notes{background:#fff7e0;border:1px solid #e8c46a;padding:.4em .9em;margin:.8em 0}.notes ul{margin:.3em 0}
.settings code{overflow-wrap:anywhere}.flat{color:#444}
svg{max-width:100%;height:auto}.scroll{overflow-x:auto}.note{color:#666;font-style:italic}
details.q{border:1px solid #ddd;margin:.3em 0;padding:.3em .6em}details.q>summary{cursor:pointer}
.answer{white-space:pre-wrap;min-width:14em;max-width:40em}.rel{font-weight:bold}.error{color:#b42318}
.key i{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:middle}
"""
_CSP = "default-src 'none'; style-src 'unsafe-inline'"


def pareto_front(points: Sequence[tuple[str, float, float]], higher_is_better: bool = True) -> list[str]:
    """The names of the ``(name, cost, quality)`` points that no other point dominates.

    A point dominates another when it costs at most as much and is at least as good, and is
    strictly better in one of the two ("good" follows ``higher_is_better``). Equal points do not
    dominate each other, so both stay. The front is ordered by cost, then best quality first.
    """
    sign = 1.0 if higher_is_better else -1.0

    def dominates(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
        cheaper, better = a[1] <= b[1], sign * a[2] >= sign * b[2]
        return cheaper and better and (a[1] < b[1] or sign * a[2] > sign * b[2])

    front = [p for p in points if not any(dominates(other, p) for other in points)]
    return [p[0] for p in sorted(front, key=lambda p: (p[1], -sign * p[2]))]


def render_html(report: Mapping[str, Any], *, max_timelines: int = 200) -> str:
    """The HTML page of an evaluation report (the JSON summary of ``selfrag eval``): the
    header with the notes a reader needs (latency under load or replayed, metrics that
    measure nothing, answers that are none), the paired differences to the baseline with
    their intervals (a figure and a table), the summary table, per metric a
    quality-versus-cost figure (interval bars, axes from zero, the Pareto front), the
    per-question values, and one ``<details>`` per question (answers side by side, metrics,
    sources, errors, timeline). Metrics that cannot tell the contenders apart get one line.

    Only the first ``max_timelines`` questions with timeline events get a timeline figure
    (the others a note). Missing values show as "n/a". Raises
    :class:`~selfrag_core.errors.MissingDependencyError` when matplotlib is not installed.
    """
    page = _Page(report)
    title = f"selfrag eval: {_e(report.get('name') or 'evaluation')}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title><style>{_CSS}</style></head><body>\n"
        f"{page.header()}\n{page.differences()}\n{page.summary_table()}\n{page.quality_cost()}\n"
        f"{page.distributions()}\n"
        f"{page.questions_section(max_timelines)}\n</body></html>\n"
    )


def write_html(report: Mapping[str, Any], path: str | Path, *, max_timelines: int = 200) -> Path:
    """Write :func:`render_html` of ``report`` to ``path`` (UTF-8) and return the path."""
    path = Path(path)
    path.write_text(render_html(report, max_timelines=max_timelines), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------- helpers


def _get(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, or None where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _num(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fmt(value: Any, digits: int = 3, signed: bool = False) -> str:
    number = _num(value)
    if number is None:
        return "n/a"
    return f"{number:+.{digits}f}" if signed else f"{number:.{digits}f}"


def _e(value: Any) -> str:
    return html.escape(str(value))


def _label(metric: Mapping[str, Any]) -> str:
    return str(metric.get("label") or metric["name"])


def _up(metric: Mapping[str, Any]) -> bool:
    """Whether higher is better on ``metric``."""
    return bool(metric.get("higher_is_better", True))


class _Plots:
    """Draws matplotlib figures (no pyplot: no window, no global figure) as inline SVG."""

    def __init__(self) -> None:
        try:
            import matplotlib
            from matplotlib.figure import Figure
        except ImportError as e:
            raise MissingDependencyError(
                f"the HTML report of selfrag eval needs matplotlib ({e}): pip install 'selfrag[eval]'"
            ) from e
        self._rc_context, self._figure, self.count = matplotlib.rc_context, Figure, 0

    def svg(self, size: tuple[float, float], title: str, draw: Callable[..., None], *args: Any) -> str:
        """``draw(fig, *args)`` on a new figure, as SVG with ids unique in the page."""
        # a fixed hash salt makes the ids deterministic; text as paths (no font); no mathtext
        with self._rc_context(
            {"svg.hashsalt": "selfrag", "svg.fonttype": "path", "font.size": 8.0, "text.parse_math": False}
        ):
            fig = self._figure(figsize=size, layout="constrained")
            draw(fig, *args)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata=_NO_METADATA)
        self.count += 1
        text = buf.getvalue()
        text = text[text.index("<svg") :]  # without the XML prolog and DOCTYPE
        # in HTML the namespaces are implied: no URL left in the page
        text = text.replace(' xmlns="http://www.w3.org/2000/svg"', "", 1)
        text = text.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "", 1)
        text = text.replace("<svg ", f'<svg role="img" aria-label="{_e(title)}" ', 1)
        ids, prefix = set(re.findall(r'\bid="([^"]+)"', text)), f"f{self.count}-"
        return _ID_REF.sub(lambda m: m[1] + prefix + m[2] if m[2] in ids else m[0], text)


# --------------------------------------------------------------------------------------- sections


def _cell(comparison: Mapping[str, Any] | None, loaded: bool) -> str:
    """A paired difference in one line: the mean, its interval, the verdict (coloured)."""
    if not isinstance(comparison, Mapping):
        return "<td class='num v-none'>n/a</td>"
    verdict = str(comparison.get("verdict") or "unknown")
    low, high = _fmt(comparison.get("low"), signed=True), _fmt(comparison.get("high"), signed=True)
    mean, css = _fmt(comparison.get("mean"), signed=True), _VERDICT_CLASS.get(verdict, "v-none")
    word = verdict if verdict in _VERDICT_CLASS else "–"
    mark = "<sup>*</sup>" if loaded and verdict in _VERDICT_CLASS else ""
    title = f"{mean} (95% CI {low} … {high}, n={comparison.get('n')}): {verdict}"
    return (
        f"<td class='num {css}' title='{_e(title)}'><b>{mean}</b> <span class='ci'>[{low}, {high}]</span>"
        f" {_e(word)}{mark}</td>"
    )


class _Page:
    """The sections of the page of one report. The metrics shown: those with a mean that
    tell the contenders apart; the others (constant, or the same for every contender on
    every question) get one line."""

    def __init__(self, report: Mapping[str, Any]) -> None:
        self.plots = _Plots()
        self.report, self.summary = report, report.get("summary")
        self.contenders = [str(c) for c in report.get("contenders") or list(self.summary or {})]
        self.baseline = str(report.get("baseline"))
        # compared with the baseline: none without one
        self.others = (
            [c for c in self.contenders if c != self.baseline] if self.baseline in self.contenders else []
        )
        self.questions = [q for q in report.get("questions") or [] if isinstance(q, Mapping)]
        scored = self._scored(report.get("metrics") or [])
        self.spread = {m["name"]: self._spread(m["name"]) for m in scored}
        self.metrics = [m for m in scored if not self.spread[m["name"]]]
        self.flat = [m for m in scored if self.spread[m["name"]]]
        self.loaded = under_load(report.get("settings") or {}, report.get("machine"))

    def _scored(self, metrics: list[Any]) -> list[Mapping[str, Any]]:
        """The report's metrics with a name and a mean for at least one contender."""
        listed = [m for m in metrics if isinstance(m, Mapping) and m.get("name")]
        return [m for m in listed if any(self.mean(c, m["name"]) is not None for c in self.contenders)]

    def _spread(self, metric: str) -> str | None:
        """:func:`metric_spread` of ``metric``'s per-question values of every contender."""
        return metric_spread(
            {
                c: [_num(_get(q, "results", c, "metrics", metric)) for q in self.questions]
                for c in self.contenders
            }
        )

    def mean(self, contender: str, metric: str) -> float | None:
        return _num(_get(self.summary, contender, "metrics", metric, "mean"))

    def notes(self) -> list[str]:
        counts = {
            c: (
                _get(self.summary, c, "latency_measured"),
                _get(self.summary, c, "questions"),
                _get(self.summary, c, "no_answers"),
            )
            for c in self.contenders
        }
        spreads = {
            _label(m): (str(self.spread[m["name"]]), self.mean(self.baseline, m["name"]), _up(m))
            for m in self.flat
        }
        report = self.report
        return reading_notes(
            report.get("settings") or {}, report.get("machine"), report.get("cache"), counts, spreads
        )

    def header(self) -> str:
        report, contenders = self.report, self.contenders
        settings = " · ".join(
            f"{_e(k)} = <code>{_e(v)}</code>" for k, v in (report.get("settings") or {}).items()
        )
        parts = [
            f"<h1>selfrag eval: {_e(report.get('name') or 'evaluation')}</h1>",
            f"<p>created {_e(report.get('created') or 'unknown')} · baseline"
            f" <b>{_e(report.get('baseline'))}</b> · {len(self.questions)} questions"
            f" · contenders: {_e(', '.join(contenders))}</p>",
            f"<p class='settings'>settings: {settings or 'unknown'}</p>",
        ]
        cache = report.get("cache")
        if isinstance(cache, Mapping):
            shared = (
                " (shared replies: one reply a prompt for every contender)"
                if cache.get("shared_replies")
                else ""
            )
            parts.append(
                f"<p>LLM calls: {_e(cache.get('hits'))} answered from the cache{shared},"
                f" {_e(cache.get('misses'))} by the model.</p>"
            )
        notes = self.notes()
        if notes:
            items = "".join(f"<li>{_e(n)}</li>" for n in notes)
            parts.append(f"<div class='notes' role='note'><b>Read this first</b><ul>{items}</ul></div>")
        problems = [
            f"<li><code>{_e(p.get('where'))}</code>: {_e(p.get('message'))}</li>"
            for p in report.get("problems") or []
            if isinstance(p, Mapping)
        ]
        errors = [
            f"<li>{_e(q.get('id'))} · {_e(c)}: <span class='error'>{_e(error)}</span></li>"
            for q in self.questions
            for c in contenders
            if (error := _get(q, "results", c, "error"))
        ]
        if problems or errors:
            more = [f"<li>and {len(errors) - 50} more</li>"] if len(errors) > 50 else []
            parts.append(
                f"<h2>Problems</h2><ul>{''.join(problems)}</ul>" if problems else "<h2>Problems</h2>"
            )
            parts.append(f"<p>Contender errors ({len(errors)}):</p><ul>{''.join(errors[:50] + more)}</ul>")
        return "<header>" + "\n".join(parts) + "</header>"

    def _kinds(self) -> list[tuple[str, str, bool]]:
        """(key, label, higher is better) of what the differences compare: the metrics, then the costs."""
        kinds = [(str(m["name"]), _label(m), _up(m)) for m in self.metrics]
        return [*kinds, ("llm_calls", "LLM calls", False), ("latency_s", "latency (s)", False)]

    def differences(self) -> str:
        """The main picture: each contender's paired difference to the baseline, per metric and cost."""
        parts = [f"<h2>Differences from {_e(self.baseline)}</h2>"]
        if not self.others:
            return parts[0] + "<p class='note'>Only the baseline ran: nothing to compare.</p>"
        rows = []
        for key, label, better in self._kinds():
            found = [
                (c, d)
                for c in self.others
                if isinstance(d := _get(self.report, "comparisons", c, key), Mapping)
                and _num(d.get("low")) is not None
                and _num(d.get("high")) is not None
            ]
            rows.append((key, f"{label} {'↑' if better else '↓'}", found))
        panels = [(label, found) for _, label, found in rows]
        rows_of_panels = -(-len(panels) // (2 if len(panels) > 3 else 1))
        height = rows_of_panels * (0.55 + 0.24 * len(self.others)) + 0.3
        title = f"paired differences from {self.baseline} with 95% intervals"
        parts.append(
            "<p>Each bar: the mean of (contender − baseline) over the questions both answered, with its"
            " 95% bootstrap interval; <span class='v-better'>green</span> when the whole interval is on the"
            " better side of zero, <span class='v-worse'>red</span> on the worse side, grey when zero is"
            " inside it (no detectable difference). The arrow says which way is better.</p>"
        )
        size = (11.0 if len(panels) > 3 else 8.0, height)
        parts.append(self.plots.svg(size, title, _draw_differences, panels, self.others))
        head = "".join(f"<th>{_e(c)}</th>" for c in self.others)
        body = "".join(
            f"<tr><th>{_e(label)}</th>"
            + "".join(
                _cell(_get(self.report, "comparisons", c, key), key == "latency_s" and bool(self.loaded))
                for c in self.others
            )
            + "</tr>"
            for key, label, _ in rows
        )
        parts.append(
            f"<table class='differences'><tr><th>vs {_e(self.baseline)}</th>{head}</tr>{body}</table>"
        )
        if self.loaded:
            parts.append("<p class='note'>* measured under load (see the notes above).</p>")
        if self.flat:
            same = ", ".join(_label(m) for m in self.flat)
            parts.append(f"<p class='flat'>Left out, the same for every contender: {_e(same)}.</p>")
        return "\n".join(parts)

    def _counts(self) -> tuple[dict[str, list[str]], list[tuple[str, str]], list[str]]:
        """The summary's counts per contender, formatted (by key), the columns (header, key)
        that tell contenders apart, and those the same for every contender said once
        ("questions 6", "errors 0"; an unknown one is not said)."""
        values = {k: [_fmt(_get(self.summary, c, k), d) for c in self.contenders] for _, k, d in _COLUMNS}
        alike = {k for k, v in values.items() if len(self.contenders) > 1 and len(set(v)) == 1}
        columns = [(h, k) for h, k, _ in _COLUMNS if k not in alike]
        same = [f"{h} {values[k][0]}" for h, k, _ in _COLUMNS if k in alike and values[k][0] != _fmt(None)]
        return values, columns, same

    def summary_table(self) -> str:
        baseline, metrics = self.baseline, self.metrics
        arrows = ["↑" if m.get("higher_is_better", True) else "↓" for m in metrics]
        values, columns, same = self._counts()
        head = "".join(f"<th>{_e(_label(m))} {a}</th>" for m, a in zip(metrics, arrows, strict=True))
        rows = [f"<tr><th>contender</th>{head}{''.join(f'<th>{h}</th>' for h, _ in columns)}</tr>"]
        for i, c in enumerate(self.contenders):
            cells = [f"<td class='num'>{_fmt(self.mean(c, m['name']))}</td>" for m in metrics]
            cells += [f"<td class='num'>{values[key][i]}</td>" for _, key in columns]
            rows.append(f"<tr><th>{_e(c)}{' (baseline)' if c == baseline else ''}</th>{''.join(cells)}</tr>")
        flat = [
            f"{_e(_label(m))} {_fmt(self.mean(baseline, m['name']))}"
            + (" (every answer)" if self.spread[m["name"]] == "constant" else "")
            for m in self.flat
        ] + same
        line = f"<p class='flat'>The same for every contender: {', '.join(flat)}.</p>" if flat else ""
        latency = (
            "<p class='note'>Latency: of the questions where the contender made every LLM call itself"
            " (measured: the number of them).</p>"
        )
        return f"<h2>Summary</h2><table class='summary'>{''.join(rows)}</table>{line}{latency}"

    def quality_cost(self) -> str:
        parts = [
            "<h2>Quality versus cost</h2><p>Each point: a contender's mean, its bar the 95% bootstrap"
            " interval of that mean; both axes start at zero. The dashed line joins the Pareto front"
            " (no other contender is cheaper and at least as good).</p>"
        ]
        for m in self.metrics:
            better = _up(m)
            panels = []
            for key, cost_label in _COSTS:
                points = [
                    (c, cost, quality)
                    for c in self.contenders
                    if (cost := _num(_get(self.summary, c, key))) is not None
                    and (quality := self.mean(c, m["name"])) is not None
                ]
                bars = {
                    c: (
                        _num(_get(self.summary, c, "intervals", m["name"], "low")),
                        _num(_get(self.summary, c, "intervals", m["name"], "high")),
                    )
                    for c, _, _ in points
                }
                panels.append((cost_label, points, pareto_front(points, better), bars))
            ylabel = _label(m) + ("" if better else " (lower is better)")
            title = f"{_label(m)} versus cost"
            parts.append(self.plots.svg((8.0, 3.0), title, _draw_tradeoff, panels, ylabel, self.contenders))
            fronts = "; ".join(f"by {label}: {', '.join(front) or 'n/a'}" for label, _, front, _ in panels)
            missing = [c for c in self.contenders if _num(_get(self.summary, c, "latency_p50")) is None]
            gone = f" No latency for {', '.join(missing)} (not measured)." if missing else ""
            parts.append(f"<p>Pareto front (not dominated) {_e(fronts)}.{_e(gone)}</p>")
        return "\n".join(parts)

    def distributions(self) -> str:
        series: list[tuple[str, tuple[str, ...]]] = [
            (_label(m), ("metrics", m["name"])) for m in self.metrics
        ]
        series += [("latency (s)", ("latency_s",)), ("LLM calls", ("llm_calls",))]
        shares = len(self.metrics)  # the metrics are shares (0 to 1), the costs are not
        parts = ["<h2>Per-question distributions</h2>"]
        for i, (label, keys) in enumerate(series):
            values = [
                [
                    _num(_get(q, "results", c, *keys))
                    if keys != ("latency_s",) or not _get(q, "results", c, "replayed_calls")
                    else None
                    for q in self.questions
                ]
                for c in self.contenders
            ]
            data = [[v for v in row if v is not None] for row in values]
            title = f"{label} per question"
            share = i < shares
            parts.append(self.plots.svg((6.0, 2.6), title, _draw_strip, data, label, self.contenders, share))
        return "\n".join(parts)

    def questions_section(self, max_timelines: int) -> str:
        contenders, names = self.contenders, [m["name"] for m in self.metrics]
        key = "f1" if "f1" in names else (names[0] if names else None)
        legend = "".join(
            f"<i style='background:{colour}'></i>{kind}" for kind, colour in _EVENT_COLOURS.items()
        )
        parts = [
            f"<h2>Questions</h2><p class='key'>Timelines (rows = contenders, in seconds):{legend}."
            f" Only the first {max_timelines} questions with events get one.</p>"
        ]
        timelines = 0
        for q in self.questions:
            results, text = q.get("results") or {}, str(q.get("question") or "")
            relevant = {str(r) for r in q.get("relevant") or []}
            answers = " | ".join(str(a) for a in q.get("answers") or [])
            line = _question_line(q, key, contenders)
            parts.append(
                f"<details class='q'><summary>{line}</summary>"
                f"<p><b>Question:</b> {_e(text)}<br><b>Gold answers:</b> {_e(answers or 'none')}<br>"
                f"<b>Relevant:</b> {_e(', '.join(sorted(relevant)) or 'none')}</p>"
                f"{_answers_table(results, contenders, relevant)}"
            )
            if any(_get(results, c, "timeline") for c in contenders):
                if timelines < max_timelines:
                    size, title = (6.0, 0.6 + 0.28 * len(contenders)), f"timeline of {q.get('id')}"
                    parts.append(self.plots.svg(size, title, _draw_timeline, results, contenders))
                    timelines += 1
                else:
                    parts.append("<p class='note'>Timeline left out (max_timelines reached).</p>")
            parts.append("</details>")
        return "\n".join(parts)


def _question_line(q: Mapping[str, Any], key: str | None, contenders: list[str]) -> str:
    """A question's line in the list: its id, its text cut short, and each contender's
    score on the ``key`` metric (or ``error``)."""
    results, text = q.get("results") or {}, str(q.get("question") or "")
    short = text if len(text) <= 90 else text[:89] + "…"
    line = f"<b>{_e(q.get('id'))}</b> {_e(short)}"
    if key:
        scores = (_fmt(_get(results, c, "metrics", key), 2) for c in contenders)
        line += f" — {_e(key)}: " + " · ".join(
            f"{_e(c)} {'error' if _get(results, c, 'error') else score}"
            for c, score in zip(contenders, scores, strict=True)
        )
    return line


def _answers_table(results: Mapping[str, Any], contenders: list[str], relevant: set[str]) -> str:
    rows: dict[str, list[str]] = {"answer": [], "metrics": [], "sources": [], "cost": [], "problems": []}
    for c in contenders:
        r = results.get(c) or {}
        rows["answer"].append(f"<div class='answer'>{_e(r.get('answer') or '')}</div>")
        rows["metrics"].append("<br>".join(f"{_e(k)} {_fmt(v)}" for k, v in (r.get("metrics") or {}).items()))
        rows["sources"].append(_sources_list(r, relevant))
        rows["cost"].append(
            f"{_fmt(r.get('llm_calls'), 0)} LLM calls, {_fmt(r.get('input_tokens'), 0)} +"
            f" {_fmt(r.get('output_tokens'), 0)} tokens, {_fmt(r.get('latency_s'), 2)} s"
        )
        problems = [f"<span class='error'>error: {_e(r['error'])}</span>"] if r.get("error") else []
        problems += [f"fallback: {_e(f)}" for f in r.get("fallbacks") or []]
        rows["problems"].append("<br>".join(problems) or "none")
    head = "".join(f"<th>{_e(c)}</th>" for c in contenders)
    body = "".join(
        f"<tr><th>{k}</th>{''.join(f'<td>{v}</td>' for v in cells)}</tr>" for k, cells in rows.items()
    )
    return f"<div class='scroll'><table class='answers'><tr><th></th>{head}</tr>{body}</table></div>"


def _sources_list(result: Mapping[str, Any], relevant: set[str]) -> str:
    """A contender's sources as a list, the relevant ones marked (``none`` without one)."""
    sources = []
    for s in (s for s in result.get("sources") or [] if isinstance(s, Mapping)):
        mark = (" class='rel'", " ✓ relevant") if str(s.get("id")) in relevant else ("", "")
        sources.append(
            f"<li{mark[0]} title='{_e(s.get('text') or '')}'>{_e(s.get('id'))}{mark[1]}: "
            f"{_e(s.get('title') or '')}</li>"
        )
    return f"<ol>{''.join(sources)}</ol>" if sources else "none"


# ---------------------------------------------------------------------------------------- figures


_VERDICT_COLOURS = {"better": "#1a7f37", "worse": "#b42318"}


def _draw_differences(fig: Figure, panels: list[Any], contenders: list[str]) -> None:
    """A panel per metric or cost, a row per contender: the mean difference as a point, its
    interval as a bar, coloured by the verdict; zero marked, the axis symmetric around it."""
    columns = 2 if len(panels) > 3 else 1
    grid = fig.subplots(-(-len(panels) // columns), columns, squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    for ax, (label, found) in zip(axes, panels, strict=False):
        where = dict(found)
        reach = max(
            (abs(_num(d.get(k)) or 0.0) for _, d in found for k in ("low", "high", "mean")), default=0.0
        )
        reach = reach * 1.15 or 1.0
        ax.axvline(0.0, color="0.15", linewidth=1.0, zorder=1)
        for row, c in enumerate(contenders):
            d = where.get(c)
            if d is None:
                ax.text(0.0, row, "  not measured", va="center", ha="left", color="0.4")
                continue
            mean, low, high = _num(d.get("mean")) or 0.0, _num(d["low"]) or 0.0, _num(d["high"]) or 0.0
            colour = _VERDICT_COLOURS.get(str(d.get("verdict")), "0.45")
            ax.plot([low, high], [row, row], color=colour, linewidth=2.5, solid_capstyle="butt", zorder=2)
            ax.plot([mean], [row], "o", color=colour, markersize=5, zorder=3)
        ax.set_yticks(range(len(contenders)), labels=contenders)
        ax.set_ylim(len(contenders) - 0.5, -0.5)
        ax.set_xlim(-reach, reach)
        ax.set_title(label, loc="left", fontsize=8.5)
        ax.grid(axis="x", alpha=0.3)


def _draw_tradeoff(fig: Figure, panels: list[Any], ylabel: str, contenders: list[str]) -> None:
    """One panel per cost: a point per contender with its interval bar, the Pareto front
    dashed; the cost axis from zero, the quality axis 0 to 1 for a share."""
    colours = {c: f"C{i % 10}" for i, c in enumerate(contenders)}
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    ends = [
        v
        for _, points, _, bars in panels
        for c, _, q in points
        for v in (q, *bars.get(c, ()))
        if v is not None
    ]
    for ax, (cost_label, points, front, bars) in zip(axes, panels, strict=True):
        where = {name: (cost, quality) for name, cost, quality in points}
        _draw_points(ax, points, bars, colours)
        if front:
            xs, ys = [where[n][0] for n in front], [where[n][1] for n in front]
            style = {"color": "0.4", "marker": "o", "markersize": 11, "markerfacecolor": "none"}
            ax.plot(xs, ys, "--", zorder=2, label="Pareto front", **style)
            ax.legend(loc="best")
        ax.set_xlim(0.0, max((cost for _, cost, _ in points), default=0.0) * 1.25 or 1.0)
        ax.set_xlabel(cost_label)
        ax.grid(alpha=0.3)
    if ends and min(ends) >= 0.0 and max(ends) <= 1.0:  # a share: the whole scale
        axes[0].set_ylim(0.0, 1.05)
    elif ends:
        axes[0].set_ylim(min(0.0, min(ends)), max(ends) * 1.1 or 1.0)
    axes[0].set_ylabel(ylabel)


def _draw_points(ax: Any, points: list[Any], bars: Mapping[str, Any], colours: Mapping[str, str]) -> None:
    """A point per contender at its (cost, quality) with its interval bar and its name; the
    names of points in the same place stacked."""
    placed: list[tuple[float, float]] = []
    for name, cost, quality in points:
        low, high = bars.get(name, (None, None))
        near = sum(1 for x, y in placed if abs(x - cost) < 1e-9 and abs(y - quality) < 1e-9)
        placed.append((cost, quality))
        if low is not None and high is not None:
            below, above = max(quality - low, 0.0), max(high - quality, 0.0)
            ax.errorbar([cost], [quality], yerr=[[below], [above]], color=colours[name], capsize=3, zorder=3)
        ax.scatter([cost], [quality], color=colours[name], zorder=4)
        ax.annotate(name, (cost, quality), xytext=(5, 3 + 9 * near), textcoords="offset points")


def _draw_strip(fig: Figure, data: list[list[float]], label: str, contenders: list[str], share: bool) -> None:
    """A box plot per contender with its per-question values on top (deterministic jitter)."""
    ax = fig.subplots()
    filled = [i for i, values in enumerate(data) if values]
    if filled:
        ax.boxplot([data[i] for i in filled], positions=[i + 1 for i in filled], widths=0.5, showfliers=False)
    for i, values in enumerate(data):
        xs = [i + 1 + ((j * 0.618034) % 1 - 0.5) * 0.3 for j in range(len(values))]
        ax.scatter(xs, values, s=9, alpha=0.6, color=f"C{i % 10}", zorder=3)
    ax.set_xticks(range(1, len(contenders) + 1), labels=contenders)
    ax.set_xlim(0.5, len(contenders) + 0.5)
    every = [v for values in data for v in values]
    if share and every and min(every) >= 0.0 and max(every) <= 1.0:
        ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel(label)
    ax.grid(axis="y", alpha=0.3)


def _draw_timeline(fig: Figure, results: Mapping[str, Any], contenders: list[str]) -> None:
    """A row per contender; a bar per timeline event, coloured by kind (LLM call, retrieval)."""
    ax = fig.subplots()
    for row, c in enumerate(contenders):
        spans: dict[str, list[tuple[float, float]]] = {}
        for event in _get(results, c, "timeline") or []:
            start, length = _num(_get(event, "start_s")), _num(_get(event, "latency_s"))
            if start is not None and length is not None:
                kind = str(_get(event, "kind"))
                spans.setdefault(kind if kind in _EVENT_COLOURS else "other", []).append(
                    (start, max(length, 0.0))
                )
        for kind, bars in spans.items():
            ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=_EVENT_COLOURS[kind], edgecolor="white")
    ax.set_yticks(range(len(contenders)), labels=contenders)
    ax.set_ylim(len(contenders) - 0.5, -0.5)
    ax.set_xlabel("seconds")
    ax.grid(axis="x", alpha=0.3)

"""The model's answer or a quote from the sources? Which one each check would choose.

Reads, for one question set, the answers of a run with the model (``selfrag eval
--strategies plain --llm local``) and of one with the extractive stand-in (``--llm
fake``: the first sentence of the best passage), and for every question scores both
candidates, and the source sentence that speaks most to the question (the quote a
strategy falls back on), with the checks: the rules' score
(:func:`selfrag_core.verify.verify_answer`'s ``score``), the fitted support
``probability`` and ``informativeness``. It prints, per way of choosing, the mean F1,
F1 beyond the question's words (``f1_new``), gold-in-answer and (where the data has one)
the yes/no decision of the chosen answers, with the paired 95% interval of each against
always taking the model's answer::

    .venv/bin/python benchmarks/answer_choice.py DATA MODEL_RUN QUOTE_RUN [DATA MODEL_RUN QUOTE_RUN ...]

Each set is reported on its own. ``--fit FILE`` fits the choice check on the sets given
(tuning sets only) and writes its coefficients into FILE (a checks file, its
``choice`` entry); ``--checks FILE`` reports with another checks file than the shipped one.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selfrag_core.citations import without_markers
from selfrag_core.evaluation.data import load_questions
from selfrag_core.evaluation.metrics import (
    answer_contains_gold,
    decision_match,
    new_word_f1,
    paired_difference,
    token_f1,
)
from selfrag_core.signals.choice import CHOICE_FEATURES, choice_features
from selfrag_core.signals.fitted import Checks, LogisticCheck, fit, shipped
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, kept_decision, quoted_answer
from selfrag_core.types import RetrievedDoc


@dataclass
class Candidate:
    kind: str
    answer: str
    features: dict[str, float]
    scores: dict[str, float | None]


def _passage(source: dict[str, Any], texts: dict[str, str]) -> str:
    body = texts.get(source["id"]) or texts.get(str(source["id"]).split("#")[0])
    if body is None:
        return str(source["text"])
    title = source.get("title")
    return f"{title}\n{body}" if title and str(source["text"]).startswith(f"{title}\n") else body


def _runs(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in (path / "results.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        out[entry["id"]] = entry["results"]["plain"]
    return out


def candidates(data: str, model_run: Path, quote_run: Path) -> list[list[Candidate]]:
    """Per question: the model's answer, the stand-in's and the fallback quote, scored."""
    loaded = load_questions(data)
    texts = {d.id: d.text for d in loaded.corpus or []}
    model, quote = _runs(model_run), _runs(quote_run)
    rows = []
    for q in loaded.questions:
        if q.id not in model or q.id not in quote:
            continue
        sources = model[q.id].get("sources") or []
        passages = [_passage(s, texts) for s in sources]
        docs = [RetrievedDoc(text=p, score=1.0) for p in passages]
        found = quoted_answer(q.question, docs)
        said = model[q.id].get("answer") or ""
        answers = {
            "model": said,
            "stand-in": quote[q.id].get("answer") or "",
            "quote": found or "",
            "quote, the model's yes/no kept": kept_decision(said, found) if found else "",
        }
        row = []
        for kind, answer in answers.items():
            text = without_markers(answer)
            failed = not text.strip() or text.strip() == GENERATION_FAILED_ANSWER
            scores = {
                "f1": 0.0 if failed else token_f1(text, q.answers),
                "f1_new": 0.0 if failed else new_word_f1(text, q.answers, q.question),
                "gold": 0.0 if failed else answer_contains_gold(text, q.answers, q.question),
                "decision": decision_match(text, q.decision),
            }
            # the choice is made on the quote itself (the kept yes/no only rides along)
            chosen_on = found or "" if kind.startswith("quote") else answer
            features = choice_features(chosen_on, q.question, passages, quote=kind != "model")
            row.append(Candidate(kind, answer, features, scores))
        rows.append(row)
    return rows


Chooser = Callable[[list[Candidate]], Candidate]


def by(key: str, other: int = 1) -> Chooser:
    """Of the model's answer and candidate ``other`` (1: the stand-in's, 2: the quote),
    the one with the highest feature ``key`` (the model's on a tie)."""
    return lambda row: max((row[0], row[other]), key=lambda c: c.features[key] if c.answer else -1.0)


def by_check(check: LogisticCheck, other: int = 1) -> Chooser:
    return lambda row: max(
        (row[0], row[other]), key=lambda c: check.probability(c.features) if c.answer else -1.0
    )


def report(name: str, rows: list[list[Candidate]], choosers: dict[str, Chooser]) -> None:
    print(f"{name}: {len(rows)} questions")
    base = [row[0] for row in rows]
    for label, choose in choosers.items():
        chosen = [choose(row) for row in rows]
        quotes = sum(c.kind != "model" for c in chosen)
        parts = []
        for metric in ("f1", "f1_new", "gold", "decision"):
            pairs = [
                (c.scores[metric], b.scores[metric])
                for c, b in zip(chosen, base, strict=True)
                if c.scores[metric] is not None and b.scores[metric] is not None
            ]
            if not pairs:
                continue
            mean = sum(p[0] for p in pairs) / len(pairs)
            diff = paired_difference([p[0] for p in pairs], [p[1] for p in pairs])
            parts.append(f"{metric} {mean:.3f} ({diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}])")
        print(f"  {label:<22} quotes {quotes:>3}  " + "  ".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", help="DATA MODEL_RUN QUOTE_RUN, for each set")
    parser.add_argument("--fit", type=Path, help="fit the choice check on these sets into this checks file")
    parser.add_argument(
        "--checks", type=Path, help="the checks file to report with (default: the shipped one)"
    )
    args = parser.parse_args()
    if len(args.sets) % 3:
        parser.error("give DATA MODEL_RUN QUOTE_RUN for each set")
    sets = [
        (data, candidates(data, Path(m), Path(q)))
        for data, m, q in zip(args.sets[::3], args.sets[1::3], args.sets[2::3], strict=True)
    ]
    if args.fit:
        rows = [c for _, found in sets for row in found for c in row[:3] if c.answer]
        labels = [bool(c.scores["gold"]) for c in rows]
        check = fit([c.features for c in rows], labels, CHOICE_FEATURES, l2=10.0)
        about = {"fitted_on": ", ".join(Path(d).name for d, _ in sets), "candidates": len(rows)}
        check = LogisticCheck(check.features, check.mean, check.scale, check.weights, check.bias, 0.5, about)
        checks = Checks.load(args.fit) if args.fit.exists() else shipped()
        checks.with_kind("choice", {"lexical": check}).save(args.fit)
        weights = dict(zip(check.features, (round(w, 3) for w in check.weights), strict=True))
        print(f"wrote {args.fit}: {weights}")
    checks = Checks.load(args.checks) if args.checks else shipped()
    choosers: dict[str, Chooser] = {
        "the model's answer": lambda row: row[0],
        "the stand-in's answer": lambda row: row[1],
        "the quote (or the model)": lambda row: row[2] if row[2].answer else row[0],
        "stand-in by rules score": by("score"),
        "stand-in by support": by("probability"),
        "stand-in by answering": by("informativeness"),
        "quote by rules score": by("score", 2),
        "quote by support": by("probability", 2),
        "quote by answering": by("informativeness", 2),
    }
    if checks.has("choice"):
        choosers["stand-in by choice"] = by_check(checks.pick("choice", False))
        choosers["quote by choice"] = by_check(checks.pick("choice", False), 2)
        choosers["quote+yes/no by choice"] = by_check(checks.pick("choice", False), 3)
    for data, found in sets:
        report(data, found, choosers)


if __name__ == "__main__":
    main()

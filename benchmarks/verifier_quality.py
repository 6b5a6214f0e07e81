"""How well does the support check separate right answers from wrong ones?

Reads the answers of a ``selfrag eval`` run (``results.jsonl``) and the data it ran on,
and scores every answer twice on the same passages (each source's full text from the
data's corpus): with the claim-level verifier (``selfrag_core.verify``, the library's
check) and with the signal it replaced (half of the answer's content words anywhere in
the concatenated context, ``grounding.support`` over the union). For each it prints,
per contender:

* AUROC: how well the support score predicts "a gold answer is in the answer" (judged
  as the harness judges it, so a run recorded before a pick was judged by its pick is
  read as it would be now);
* the mean F1 of the answers it certifies and of those it flags, and their ratio
  (issue #35 asks flagged <= a third of certified);

over all its answers (what issue #35 measures), then separately for questions whose gold
answer is "yes" or "no" (HotpotQA's comparisons) and for the others.

    .venv/bin/python benchmarks/verifier_quality.py eval-results/xquad100 \
        ../shared/data/xquad_en/xquad.en.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from selfrag_core.citations import without_markers
from selfrag_core.evaluation.data import load_questions
from selfrag_core.evaluation.metrics import answer_contains_gold, auroc
from selfrag_core.grounding import degenerate_reason, support
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER
from selfrag_core.verify import verify_answer


def _legacy(answer: str, question: str, passages: list[str]) -> float:
    """The replaced signal: 0 when degenerate, else the share of the answer's content
    words found anywhere in the union of the passages (1 for a span of it)."""
    union = "\n\n".join(passages)
    return 0.0 if degenerate_reason(answer, question, union) else support(answer, union)


def _verified(answer: str, question: str, passages: list[str]) -> float | None:
    """The verifier's score (0 when degenerate), None for an answer with nothing to check
    ("Yes."), as the harness's ``support_score``."""
    if degenerate_reason(answer, question, "\n\n".join(passages)):
        return 0.0
    return verify_answer(answer, passages, question=question).score


def _passage(source: dict[str, Any], texts: dict[str, str]) -> str:
    """A source's full text as the strategies saw it: the corpus's text (the run keeps 300
    characters of it), after its title when the index put the title first."""
    body = texts.get(source["id"])
    if body is None:
        return str(source["text"])
    title = source.get("title")
    return f"{title}\n{body}" if title and str(source["text"]).startswith(f"{title}\n") else body


def _row(name: str, scores: list[float], golds: list[bool], f1s: list[float]) -> str:
    certified = [f for s, f in zip(scores, f1s, strict=True) if s >= 0.5]
    flagged = [f for s, f in zip(scores, f1s, strict=True) if s < 0.5]
    mean_c = sum(certified) / len(certified) if certified else float("nan")
    mean_f = sum(flagged) / len(flagged) if flagged else float("nan")
    area = auroc(scores, golds)
    ratio = mean_f / mean_c if certified and mean_c else float("nan")
    return (
        f"  {name:<10} AUROC {'n/a' if area is None else f'{area:.3f}':>6}   certified {len(certified):>3} "
        f"F1 {mean_c:.3f}   flagged {len(flagged):>3} F1 {mean_f:.3f}   flagged/certified {ratio:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="an eval run's folder (results.jsonl)")
    parser.add_argument("data", help="the questions it ran on (BEIR folder, SQuAD .json, .jsonl)")
    args = parser.parse_args()
    data = load_questions(args.data)
    texts = {d.id: d.text for d in data.corpus or []}
    questions = {q.id: q for q in data.questions}
    rows: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for line in (args.results / "results.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        question = questions.get(entry["id"])
        for contender, result in entry["results"].items():
            answer, metrics = result.get("answer") or "", result.get("metrics") or {}
            if question is None or result.get("error") or answer.strip() == GENERATION_FAILED_ANSWER:
                continue
            if metrics.get("gold_in_answer") is None or metrics.get("f1") is None:
                continue
            passages = [_passage(s, texts) for s in result.get("sources") or []]
            verified = _verified(answer, question.question, passages)
            if verified is None:
                continue  # nothing to check: the harness leaves these out too
            yes_no = {a.strip().casefold() for a in question.answers} <= {"yes", "no"}
            legacy = _legacy(answer, question.question, passages)
            # judged as the harness judges it now: a pick by its pick (answer_contains_gold)
            gold = answer_contains_gold(without_markers(answer), question.answers, question.question)
            for key in (contender, contender + (" (gold yes/no)" if yes_no else " (gold not yes/no)")):
                row = rows[key]
                row["gold"].append(bool(gold))
                row["f1"].append(float(metrics["f1"]))
                row["verifier"].append(verified)
                row["legacy"].append(legacy)
    for contender, row in rows.items():
        print(f"{contender} ({len(row['gold'])} answers, {sum(row['gold'])} with a gold answer in them)")
        print(_row("verifier", row["verifier"], row["gold"], row["f1"]))
        print(_row("replaced", row["legacy"], row["gold"], row["f1"]))


if __name__ == "__main__":
    main()

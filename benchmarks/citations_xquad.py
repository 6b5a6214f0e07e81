"""How the answers of an evaluation cite their sources (issue 20's figures), from the
``results.jsonl`` of ``selfrag eval`` on XQuAD, without any LLM call:

* the share of answers with at least one ``[n]`` marker as the model wrote it, and
  with at least one supported sentence after the library's attribution;
* the token F1 (against the gold answers) of the sentences flagged unsupported against
  that of the other sentences: the flag is useful when it separates them.

Sources are re-read whole from the data set (the results keep 300 characters of each).

    selfrag eval ../shared/data/xquad_en/xquad.en.json --strategies plain --limit 100 \
        --out eval-results/xquad-cite
    python benchmarks/citations_xquad.py eval-results/xquad-cite/results.jsonl [--contender plain]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from selfrag_core.citations import cite
from selfrag_core.evaluation import load_squad
from selfrag_core.evaluation.metrics import token_f1
from selfrag_core.grounding import is_refusal
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER
from selfrag_core.types import RetrievedDoc


def mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f} (n={len(values)})" if values else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/xquad_en/xquad.en.json"))
    parser.add_argument("--contender", default="plain")
    args = parser.parse_args()
    data = load_squad(args.data)
    golds = {q.id: q.answers for q in data.questions}
    texts = {d.id: d.text for d in data.corpus or []}
    answers = marked = attributed = 0
    supported_f1: list[float] = []
    unsupported_f1: list[float] = []
    for line in args.results.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        result = record["results"].get(args.contender)
        if result is None or result["error"]:
            continue
        answer = result["answer"]
        if not answer.strip() or answer.strip() == GENERATION_FAILED_ANSWER or is_refusal(answer):
            continue
        sources = [RetrievedDoc(texts.get(s["id"], s["text"])) for s in result["sources"]]
        citations = cite(answer, sources)
        answers += 1
        marked += any(c.cited for c in citations)
        attributed += any(c.supported for c in citations)
        for c in citations:
            f1 = token_f1(c.sentence, golds[record["id"]]) or 0.0
            (supported_f1 if c.supported else unsupported_f1).append(f1)
    print(f"{args.results} ({args.contender}): {answers} answers (refusals and failures left out)")
    print(f"  with a [n] marker as written:       {marked / max(answers, 1):.1%}")
    print(f"  with a supported sentence after attribution: {attributed / max(answers, 1):.1%}")
    print(f"  sentence F1, supported:   {mean(supported_f1)}")
    print(f"  sentence F1, unsupported: {mean(unsupported_f1)}")


if __name__ == "__main__":
    main()

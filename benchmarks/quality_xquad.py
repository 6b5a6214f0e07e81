"""Answer quality of every strategy against a plain retrieve-and-answer, on XQuAD
(English), with a local model: SQuAD exact match and token F1 (best over the gold
answers), the share of answers that contain a gold answer, the share that are a fallback
("error in generating answer", ...), and LLM calls per question. The strategies are
sized as the CLI sizes them for a small model (``selfrag_core.presets.build_strategy``).

Uses the public API only, so the same file measures another checkout of the library
(``PYTHONPATH=/path/to/other/checkout python benchmarks/quality_xquad.py``): run it
before and after a change to a strategy's behaviour. Greedy decoding: the figures
repeat. Needs the [local] extra. Prints figures only.

    python benchmarks/quality_xquad.py --questions 20 --model smollm2
"""

from __future__ import annotations

import argparse
import time

from xquad_selfrag import best, load  # same folder: SQuAD normalisation and the data

import selfrag_core
from selfrag_core import RecursiveRAG, RecursiveRAGConfig, StrategyError
from selfrag_core.presets import build_strategy
from selfrag_core.testing import FakeRetriever

FALLBACKS = (
    "error in generating answer",
    "There is insufficient information.",
    "There is not enough information.",
    "The context does not contain the answer.",
)


def answer(strategy: object, question: str) -> object:
    if hasattr(strategy, "ask_with_report_sync"):
        try:
            return strategy.ask_with_report_sync(question)
        except StrategyError as e:
            return e.report
    return strategy.query(question)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--strategies", nargs="+", default=["plain", "self", "hyde", "recursive", "healing"])
    args = parser.parse_args()
    from selfrag_core.local import LocalLLM

    paragraphs, questions = load(args.questions)
    backend = FakeRetriever(paragraphs)
    llm = LocalLLM(args.model)
    print(f"selfrag from {selfrag_core.__file__}")
    print(f"XQuAD en, {len(questions)} questions, model {args.model}, top_k={args.top_k} (keyword retriever)")
    header = ("strategy", "EM", "F1", "gold in", "fallback", "calls/q", "s/q")
    print("{:10s} {:>6s} {:>6s} {:>8s} {:>9s} {:>8s} {:>6s}".format(*header))
    for name in args.strategies:
        if name == "plain":  # one retrieval, one answer: a question never decomposed
            config = RecursiveRAGConfig(min_query_length=10**6, top_k=args.top_k)
            strategy: object = RecursiveRAG(backend, llm, config)
        else:
            strategy = build_strategy(name, backend, llm, top_k=args.top_k)
        ems = f1s = contains = fallbacks = calls = 0.0
        start = time.perf_counter()
        for question, golds in questions:
            result = answer(strategy, question)
            text = str(getattr(result, "answer", ""))
            em, f = best(text, golds)
            ems, f1s = ems + em, f1s + f
            contains += any(g.lower() in text.lower() for g in golds)
            fallbacks += text.strip() in FALLBACKS or not text.strip()
            calls += result.trace.llm_calls  # type: ignore[attr-defined]
        n = len(questions)
        wall = (time.perf_counter() - start) / n
        print(
            f"{name:10s} {100 * ems / n:6.1f} {100 * f1s / n:6.1f} {100 * contains / n:7.0f}% "
            f"{100 * fallbacks / n:8.0f}% {calls / n:8.1f} {wall:6.1f}"
        )


if __name__ == "__main__":
    main()

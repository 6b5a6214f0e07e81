"""Do the retrieved passages speak to the question at all? The fitted relevance check.

A backend's scores cannot say "nothing relevant": they are ranks, or min-max scaled so
that the best of irrelevant passages scores 1. The relevance check
(:func:`selfrag_core.signals.features.relevance_features`, fitted) reads the question's
words and the passages instead. Each question of a set is searched (BM25, top 3) in its
own corpus (relevant when a judged passage is among them) and in another set's corpus
(out of the corpus: nothing there answers it, but the search still returns its best
matches). Fit on the shared tuning sets (XQuAD and HotpotQA, each searched in the
other's corpus); report on a set never tuned on (PubMedQA, searched in its abstracts and
in the tuning sets' corpora)::

    .venv/bin/python benchmarks/relevance_fit.py --fit selfrag_core/signals/checks.json [--embedder local]
    .venv/bin/python benchmarks/relevance_fit.py --report data/pubmedqa [--embedder local]

The threshold is the highest at which at most 0.5% of the tuning sets' relevant searches
are taken for out-of-corpus ones (a wrong "the documents do not say" costs more than a
missed one); the report prints the AUROC, and the shares of relevant and of
out-of-corpus searches below it.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.evaluation.data import EvalData, load_corpus, load_questions
from selfrag_core.evaluation.metrics import auroc
from selfrag_core.signals.features import RELEVANCE_FEATURES, SEMANTIC, relevance_features
from selfrag_core.signals.fitted import Checks, LogisticCheck, fit, shipped
from selfrag_core.store import RAG

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TUNING = {"xquad": DATA / "xquad_en" / "xquad.en.json", "hotpotqa": DATA / "hotpotqa_500" / "beir"}
MAX_FALSE_ABSTENTION = 0.005
QUESTIONS = 300  # per set and corpus


def _index(data: EvalData) -> RAG:
    rag = RAG()
    rag.index_many({"text": d.text, "source": d.id} for d in data.corpus or [])
    return rag


def searches(
    name: str, data: EvalData, own: RAG, others: list[RAG], embed: Any, seed: int = 0
) -> tuple[list[dict[str, float]], list[bool]]:
    """Rows and labels: each question searched in its own corpus (relevant when a judged
    passage is in the top 3) and in another corpus (not)."""
    rng = random.Random(seed)
    questions = [q for q in data.questions if q.relevant]
    rng.shuffle(questions)
    rows, labels = [], []
    for q in questions[:QUESTIONS]:
        found = own.retrieve(q.question, 3)
        if any(str(d.metadata.get("source")) in q.relevant for d in found):
            rows.append(relevance_features(q.question, [d.text for d in found], embed))
            labels.append(True)
        elsewhere = rng.choice(others).retrieve(q.question, 3)
        rows.append(relevance_features(q.question, [d.text for d in elsewhere], embed))
        labels.append(False)
    print(f"  {name}: {sum(labels)} relevant searches, {len(labels) - sum(labels)} out of the corpus")
    return rows, labels


def _threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    for t in np.round(np.arange(0.95, 0.0, -0.01), 2):
        if (scores[labels] < t).mean() <= MAX_FALSE_ABSTENTION:
            return float(t)
    return 0.0


def _embedder(name: str | None) -> Any:
    if name is None:
        return None
    from selfrag_core.local import LocalEmbeddings

    return LocalEmbeddings().embed_documents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fit", type=Path, metavar="FILE", help="fit on the tuning sets into this checks file"
    )
    parser.add_argument(
        "--report", type=Path, metavar="DIR", help="a fetched set (benchmarks/fetch_pubmedqa.py)"
    )
    parser.add_argument("--embedder", choices=["local"], help="also the variant over the MiniLM cosine")
    args = parser.parse_args()
    embed = _embedder(args.embedder)
    tuning = {name: load_questions(path) for name, path in TUNING.items()}
    indexes = {name: _index(data) for name, data in tuning.items()}
    if args.fit:
        print("fitting on the tuning sets")
        rows, labels = [], []
        for name, data in tuning.items():
            others = [rag for other, rag in indexes.items() if other != name]
            found = searches(name, data, indexes[name], others, embed)
            rows += found[0]
            labels += found[1]
        variants = {}
        for variant, extra in (("lexical", ()), ("semantic", (SEMANTIC,))):
            if variant == "semantic" and embed is None:
                continue
            features = (*RELEVANCE_FEATURES, *extra)
            check = fit(rows, labels, features, l2=1.0)
            scores = np.array([check.probability(r) for r in rows])
            threshold = _threshold(scores, np.array(labels))
            about = {
                "fitted_on": "XQuAD and HotpotQA questions, each searched in its own and the other's corpus"
            }
            variants[variant] = LogisticCheck(
                check.features, check.mean, check.scale, check.weights, check.bias, threshold, about
            )
            print(
                f"  {variant}: AUROC (in sample) {auroc(list(scores), labels):.3f}, threshold {threshold:.2f}"
            )
        checks = Checks.load(args.fit) if args.fit.exists() else shipped()
        checks.with_kind("relevance", variants).save(args.fit)
        print(f"wrote {args.fit}")
    if args.report:
        data = load_questions(args.report / "questions.jsonl")
        own = RAG()
        own.index_many({"text": d.text, "source": d.id} for d in load_corpus(args.report / "corpus.jsonl"))
        print(f"report on {args.report} (never tuned on)")
        rows, labels = searches(args.report.name, data, own, list(indexes.values()), embed, seed=1)
        checks = shipped()
        for variant in ("lexical", "semantic"):
            if variant == "semantic" and embed is None:
                continue
            check = checks.pick("relevance", variant == "semantic")
            scores = np.array([check.probability(r) for r in rows])
            y = np.array(labels)
            print(
                f"  {variant}: AUROC {auroc(list(scores), labels):.3f}; below the threshold "
                f"{check.threshold:.2f}: relevant {(scores[y] < check.threshold).mean():.1%}, "
                f"out of the corpus {(scores[~y] < check.threshold).mean():.1%}"
            )


if __name__ == "__main__":
    main()

"""Issue 55: what the harness knows of a strategy it asks the strategy (its hooks on
``Strategy``: ``ranking()``, ``ranking_calls()``, ``ranking_prompt(q)``,
``estimated_calls(q)``, ``step_calls``), so a strategy's knowledge stays in its module.

``Probe`` lives in this file and its registry entry is put in the table for each test
(monkeypatched): with nothing changed outside this file it gets its cost estimate, its
streamed steps, its place among AdaptiveRAG's candidates and a retrieval-only contender.
HyDERAG's hooks give the figures the special cases they replace gave.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from selfrag_core import Answer, Generate, HyDERAG, Parallel, Strategy, StrategyConfig, TraceEvent, step_of
from selfrag_core.config import HyDERAGConfig, SelfHealingRAGConfig
from selfrag_core.evaluation import EvalSettings, evaluate
from selfrag_core.evaluation.contenders import strategy_contender
from selfrag_core.evaluation.data import EvalData, EvalQuestion
from selfrag_core.evaluation.router import dry_run
from selfrag_core.presets import build_strategy
from selfrag_core.strategies import registry
from selfrag_core.strategies.adaptive import CANDIDATE_ORDER, AdaptiveRAG, candidate_names, estimate_calls
from selfrag_core.strategies.base import retrieve_or_empty
from selfrag_core.strategies.plain import DraftsRAG, PlainRAG
from selfrag_core.strategies.self_healing import SelfHealingRAG
from selfrag_core.testing import FakeLLM, FakeRetriever

# ----------------------------------------------------------------------------- the new strategy


@dataclass(frozen=True)
class ProbeConfig(StrategyConfig):
    """``top_k`` documents; ``probes`` search phrasings of the question, written in one round."""

    top_k: int = 3
    probes: int = 2


class Probe(Strategy[Answer]):
    """Writes ``probes`` search phrasings of the question, searches with the first, answers."""

    step_calls: ClassVar[dict[str, str]] = {"probe_query": "hypothesis"}

    def __init__(self, rag_system: Any, llm: Any, config: ProbeConfig | None = None, **shared: Any) -> None:
        super().__init__(rag_system, llm, **shared)
        self.config = config or ProbeConfig()

    def ranking(self) -> Any:
        return self._ranked

    def ranking_calls(self) -> float:
        return float(self.config.probes)

    def ranking_prompt(self, query: str) -> str:
        return f"Rephrase as a search query: {query}"

    def estimated_calls(self, query: str) -> float:
        return self.ranking_calls() + 1.0

    def _ranked(self, query: str, k: int) -> Any:
        asks = tuple(
            Generate(self.llm, self.ranking_prompt(query), "probe_query") for _ in range(self.config.probes)
        )
        replies = yield Parallel(asks)
        phrased = next((r.text for r in replies if not isinstance(r, BaseException)), query)
        return (yield from retrieve_or_empty(self.rag_system, phrased, k))

    def _plan(self, query: str, context: dict[str, Any]) -> Any:
        docs = yield from self._ranked(query, self.config.top_k)
        reply = yield Generate(self.llm, f"Answer {query} from: {[d.text for d in docs]}", "answer")
        return Answer(reply.text, docs)


ENTRY = registry.BuiltIn(Probe, ProbeConfig, "searches with phrasings of the question", compared=True)


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(registry.BUILT_IN, "probe", ENTRY)
    return "probe"


PLACES = {"lion": "Kenya", "penguin": "Antarctica", "panda": "China"}
DOCS = [f"The {a} lives in {p}." for a, p in PLACES.items()]
QUESTIONS = [f"Where does the {a} live?" for a in PLACES]
DATA = EvalData(
    "animals",
    [EvalQuestion(f"q{i}", q, (p,)) for i, (q, p) in enumerate(zip(QUESTIONS, PLACES.values(), strict=True))],
)


def _tokens(prompt: str, calls: float) -> float:
    return round(calls * len(prompt) / 4, 2)


# ----------------------------------------------------------------------------- a strategy of yours


def test_its_cost_estimate_is_its_own(probe: str) -> None:
    rag = FakeRetriever(DOCS)
    mine = Probe(rag, FakeLLM(), ProbeConfig(probes=3))
    assert estimate_calls(mine, QUESTIONS[0]) == 4.0
    healing = SelfHealingRAG(FakeLLM(), [rag, mine], config=SelfHealingRAGConfig(max_retries=1))
    assert estimate_calls(healing, QUESTIONS[0]) == (1 + 1) + 0.5 * (4 + 1)  # attempts and their metric
    expected = dry_run(DATA, ["plain", probe], rag, top_k=2)
    assert expected[probe]["calls"] == expected[probe]["calls_max"] == 3.0  # two probes and the answer
    ranking = dry_run(DATA, ["plain", probe, "self"], rag, top_k=2, retrieval_only=True)
    assert set(ranking) == {"plain", probe}  # self cannot rank
    assert ranking[probe]["calls"] == 2.0 and ranking["plain"] == {
        "calls": 0.0,
        "calls_max": 0.0,
        "input_tokens": 0.0,
    }
    mean = sum(_tokens(f"Rephrase as a search query: {q}", 2) for q in QUESTIONS) / len(QUESTIONS)
    assert ranking[probe]["input_tokens"] == pytest.approx(mean, abs=0.01)


def test_its_calls_are_steps_of_its_stream() -> None:
    steps = [e.step.kind for e in Probe(FakeRetriever(DOCS), FakeLLM("lion")).stream(QUESTIONS[0]) if e.step]
    assert steps == ["hypothesis", "hypothesis", "retrieval"]
    step = step_of(TraceEvent(kind="llm", name="probe_query"))
    assert step is not None and step.kind == "hypothesis"
    assert step_of(TraceEvent(kind="llm", name="answer")) is None
    with pytest.raises(ValueError, match=r"Odd.step_calls names \['musing'\]"):
        type("Odd", (Strategy,), {"step_calls": {"odd_call": "musing"}})


def test_it_is_a_candidate_of_adaptive_when_compared(probe: str) -> None:
    assert candidate_names() == (*CANDIDATE_ORDER, probe)
    assert CANDIDATE_ORDER == ("recursive", "hyde", "self", "healing")
    adaptive = AdaptiveRAG(FakeRetriever(DOCS), FakeLLM(), strategies=None)
    candidate = adaptive.strategies[probe]
    assert list(adaptive.strategies) == [*CANDIDATE_ORDER, probe]
    assert isinstance(candidate, Probe) and candidate.config.top_k == adaptive.config.top_k
    assert adaptive.expected_calls(probe, {}, QUESTIONS[0]) == 3.0
    assert adaptive.strategies["healing"].strategies[1] is adaptive.strategies["hyde"]


def test_it_ranks_as_a_retrieval_only_contender(probe: str, tmp_path: Path) -> None:
    pytest.importorskip("bm25s")
    rag = FakeRetriever(DOCS)
    outcome = strategy_contender(probe, Probe(rag, FakeLLM("penguin")), rag).rank
    assert outcome is not None
    ranked = outcome(QUESTIONS[0], 2)
    assert ranked.llm_calls == 2 and ranked.sources[0].text == DOCS[1]  # searched with its phrasing
    corpus, questions = tmp_path / "corpus.jsonl", tmp_path / "questions.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": d}) + "\n" for i, d in enumerate(DOCS)))
    questions.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": q, "relevant": [f"d{i}"]}) + "\n"
            for i, q in enumerate(QUESTIONS)
        )
    )
    settings = EvalSettings(embed="none", retrieval_only=True, preset="small")
    report = evaluate(
        questions, ["plain", probe, "self"], llm=FakeLLM("lion"), corpus=corpus, settings=settings
    )
    assert all(set(r) == {"plain", probe} for r in report.results)
    assert [r[probe]["llm_calls"] for r in report.results] == [2, 2, 2]


# ----------------------------------------------------------------------------- HyDERAG's figures


def test_hydes_hooks_give_the_old_figures() -> None:
    rag = FakeRetriever(DOCS)
    hyde = HyDERAG(rag, FakeLLM(), config=HyDERAGConfig(num_hypothetical_docs=4))
    question = QUESTIONS[0]
    prompt = hyde.prompts.render("hyde_document", "en", question=question)
    assert hyde.ranking_prompt(question) == prompt and prompt.startswith("Write a passage stating the facts")
    assert (
        hyde.ranking_calls() == 4.0
        and hyde.estimated_calls(question) == estimate_calls(hyde, question) == 5.0
    )
    assert HyDERAG.step_calls == {"hyde_document": "hypothesis"}
    assert callable(hyde.ranking())
    # plain searches once; a subclass of it, and a strategy without a ranking, cannot rank
    assert PlainRAG(rag, FakeLLM()).ranking() == "search"
    assert DraftsRAG(rag, FakeLLM()).ranking() is None and Strategy.ranking(hyde) is None
    assert Strategy.estimated_calls(hyde, question) == 2.0 and Strategy.ranking_calls(hyde) == 0.0
    # the dry run: a retrieval-only hyde writes its passages by their own prompt; answering,
    # the answer prompt over the documents too
    ranking = dry_run(DATA, ["plain", "hyde"], rag, top_k=1, preset="standard", retrieval_only=True)
    mean = sum(_tokens(hyde.prompts.render("hyde_document", "en", question=q), 3) for q in QUESTIONS) / 3
    assert ranking["hyde"]["calls"] == 3.0 and ranking["hyde"]["input_tokens"] == pytest.approx(
        mean, abs=0.01
    )
    answering = dry_run(DATA, ["plain", "hyde"], rag, top_k=1, preset="standard")
    plain, passages = answering["plain"]["input_tokens"], ranking["hyde"]["input_tokens"]
    assert answering["hyde"]["calls"] == 4.0 and answering["hyde"]["input_tokens"] == pytest.approx(
        plain + passages, abs=0.02
    )
    small = build_strategy("hyde", rag, FakeLLM(), preset="small")
    assert small.ranking_calls() == 1.0 and small.estimated_calls(question) == 2.0
    # a retrieval-only contender: its fused ranking, one LLM round with its calls counted
    rank = strategy_contender("hyde", small, None).rank
    assert rank is not None
    fused = rank(question, 2)
    assert fused.llm_calls == 1 and len(fused.sources) == 2 and fused.trace is not None

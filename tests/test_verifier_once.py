"""One verifier, chosen once (issue 35): a verifier of one's own given to a strategy's
config, to ``build_strategy`` or to ``EvalSettings`` decides support everywhere below it:
the citations, PlainRAG's and DraftsRAG's choice of draft, SelfIRAG's
``stop_when_supported``, SelfHealingRAG's evidence, AdaptiveRAG's support signal and the
evaluation's ``unsupported`` metric. Scripted verifiers, fake LLMs: no model, no network."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import presets
from selfrag_core.config import (
    AdaptiveRAGConfig,
    DraftsRAGConfig,
    GroundingConfig,
    PlainRAGConfig,
    SelfHealingRAGConfig,
    SelfRAGConfig,
)
from selfrag_core.engine import Run, run_sync
from selfrag_core.errors import ConfigurationError
from selfrag_core.strategies import AdaptiveRAG, DraftsRAG, PlainRAG, SelfHealingRAG, SelfIRAG, Strategy
from selfrag_core.strategies.drafts import drafted_answer
from selfrag_core.strategies.registry import BUILT_IN
from selfrag_core.testing import FakeLLM, FakeRetriever, judge_json
from selfrag_core.types import RetrievedDoc
from selfrag_core.verify import Verdict

QUESTION = "Why do honeybees dance?"
DOC = "Honeybees dance to show other bees the way to flowers."
ANSWER = "Honeybees dance to show the way to flowers."  # not word for word: the verifier decides


class Scripted:
    """A verifier of one's own: a sentence is supported (score 1) when ``supports(sentence)``,
    by every passage alike, else not (score 0); it counts its calls."""

    threshold = 0.5

    def __init__(self, supports: Callable[[str], bool] = lambda sentence: False) -> None:
        self.supports = supports
        self.calls = 0
        self.sentences: list[str] = []

    def verify(
        self, sentences: Sequence[str], passages: Sequence[str], question: str = ""
    ) -> list[list[Verdict]]:
        self.calls += 1
        self.sentences += sentences
        rows = []
        for sentence in sentences:
            ok = self.supports(sentence)
            rows.append([Verdict(float(ok), ok, j, None if ok else "scripted") for j in range(len(passages))])
        return rows


def nothing() -> Scripted:
    return Scripted()


def everything() -> Scripted:
    return Scripted(lambda sentence: True)


def _unsupported(result: Any) -> bool:
    return bool(result.citations) and all(
        not c.supported_by and "unsupported" in c.flags for c in result.citations
    )


# ----------------------------------------------------------------------------- the config


def test_the_verifier_is_a_keyword_of_every_config_validated_and_no_part_of_equality() -> None:
    v = nothing()
    for config in {entry.config for entry in BUILT_IN.values()}:
        made = config(verifier=v)
        assert made.verifier is v and made.replace(top_k=2).verifier is v  # type: ignore[attr-defined]
        assert made == config() and hash(made) == hash(config()) and "verifier" not in repr(made)
        with pytest.raises(TypeError, match=r"verifier must have verify\(sentences, passages, question\)"):
            config(verifier=object())
    assert PlainRAGConfig(3, 1) == PlainRAGConfig(top_k=3, llm_retries=1)  # positions unchanged
    with pytest.raises(TypeError, match="threshold"):
        PlainRAGConfig(verifier=type("NoThreshold", (), {"verify": lambda self, s, p, q="": []})())


def test_selfrags_grounding_verifier_is_its_verifier_and_two_different_ones_are_an_error() -> None:
    v = nothing()
    old = SelfRAGConfig(grounding=GroundingConfig(verifier=v))
    assert old.verifier is v and old.replace(top_k=3).verifier is v
    assert SelfRAGConfig(verifier=v, grounding=GroundingConfig(verifier=v)).verifier is v
    with pytest.raises(ConfigurationError, match="two different verifiers; set one of them"):
        SelfRAGConfig(verifier=everything(), grounding=GroundingConfig(verifier=v))
    with pytest.raises(ConfigurationError, match="two different verifiers"):
        old.replace(verifier=everything())


# ----------------------------------------------------------------------------- each strategy


def test_plains_citations_are_checked_by_its_verifier() -> None:
    rag, llm = FakeRetriever([DOC]), FakeLLM(ANSWER)
    assert PlainRAG(rag, llm).query(QUESTION).citations[0].supported_by == [1]  # the default supports it
    v = nothing()
    result = PlainRAG(rag, llm, PlainRAGConfig(verifier=v)).query(QUESTION)
    assert result.answer == ANSWER and _unsupported(result) and v.calls == 1
    assert "scripted" in result.citations[0].flags  # the verifier's own reason


APOLLO = "What was the Apollo program's budget?"
APOLLO_DOCS = [
    RetrievedDoc("The Apollo program cost $25.4 billion.", 0.9),
    RetrievedDoc("Apollo 11 landed on the Moon in 1969.", 0.8),
    RetrievedDoc("The Saturn V was a rocket.", 0.7),
]


def _apollo_llm() -> FakeLLM:
    """Over all three documents an invented figure; over the first alone the right one."""

    def reply(prompt: str) -> str:
        if "Saturn" in prompt:
            return "The program cost $40 billion."
        return "The Apollo program cost $25.4 billion." if "25.4" in prompt else "In 1969."

    return FakeLLM(reply)


@pytest.mark.parametrize("verifier", [None, "forty"])
def test_the_verifier_of_drafts_decides_which_draft_wins(verifier: str | None) -> None:
    chosen = Scripted(lambda sentence: "$40" in sentence) if verifier else None
    strategy = DraftsRAG(FakeRetriever([]), _apollo_llm(), DraftsRAGConfig(verifier=chosen))
    answer = run_sync(drafted_answer(strategy, APOLLO, APOLLO_DOCS, 2, 0), Run(strategy.execution))
    if chosen is None:  # the default verifier: the invented figure is in no document
        assert answer == "The Apollo program cost $25.4 billion."
    else:  # the scripted one certifies only the invented figure
        assert answer == "The program cost $40 billion." and chosen.calls == 3


def test_selfhealings_evidence_is_its_verifiers() -> None:
    def reply(prompt: str) -> str:
        if "factual claims" in prompt:
            return json.dumps({"claims": [{"claim": "bees dance", "supported": True}]})
        return ANSWER

    default = SelfHealingRAG(FakeLLM(reply), [FakeRetriever([DOC])]).query(QUESTION)
    assert default.attempt_details[0].evidence == 1.0 and default.success
    v = nothing()
    report = SelfHealingRAG(
        FakeLLM(reply), [FakeRetriever([DOC])], config=SelfHealingRAGConfig(verifier=v, max_retries=0)
    ).query(QUESTION)
    attempt = report.attempt_details[0]
    assert attempt.metric_score == 1.0 and attempt.evidence == 0.0  # no sentence supported
    assert report.scores == [0.5] and not report.success and _unsupported(report)


def _after_answer_signals(result: Any) -> dict[str, float]:
    routes = [e.detail for e in result.trace.events if e.name == "route"]
    return dict(routes[-1]["signals"])


def test_adaptives_support_signal_is_its_verifiers() -> None:
    rag, llm = FakeRetriever([DOC]), FakeLLM(ANSWER)
    default = AdaptiveRAG(rag, llm, strategies={}).query(QUESTION)
    assert _after_answer_signals(default)["answer_supported"] == 1.0
    v = nothing()
    result = AdaptiveRAG(rag, llm, AdaptiveRAGConfig(verifier=v), strategies={}).query(QUESTION)
    signals = _after_answer_signals(result)
    assert signals["answer_supported"] == 0.0 and signals["support_score"] == 0.0 and _unsupported(result)


def test_adaptives_own_candidates_get_its_verifier() -> None:
    v = nothing()
    adaptive = AdaptiveRAG(FakeRetriever([DOC]), FakeLLM(ANSWER), AdaptiveRAGConfig(verifier=v))
    assert set(adaptive.strategies) == {"recursive", "hyde", "self", "healing"}
    assert all(s is adaptive or s.verifier is v for s in _tree(adaptive))


def test_selfirag_stops_when_its_verifier_supports_the_first_answer() -> None:
    def llm() -> FakeLLM:
        return FakeLLM(lambda p: judge_json(ANSWER, 9) if "Judge the answer" in p else ANSWER)

    def run(verifier: Scripted) -> tuple[Any, FakeLLM]:
        model = llm()
        config = SelfRAGConfig(verifier=verifier, fast_mode=False, stop_when_supported=True)
        return SelfIRAG(FakeRetriever([DOC]), model, config).query(QUESTION), model

    yes, no = everything(), nothing()
    supported, one_call = run(yes)
    assert one_call.n_calls == 1 and supported.history[0].evaluation.ignored.startswith("not asked")
    unsupported, judged = run(no)
    assert judged.n_calls > 1 and not unsupported.history[0].evaluation.grounding.supported
    assert yes.calls and no.calls and _unsupported(unsupported)


# ----------------------------------------------------------------------------- chosen once


def _tree(strategy: Any) -> list[Strategy[Any]]:
    """``strategy`` and every strategy it is made of."""
    found = [strategy]
    children = getattr(strategy, "strategies", None)
    values = children.values() if isinstance(children, dict) else (children or [])
    for child in values:
        if isinstance(child, Strategy):
            found += _tree(child)
    return found


def _script(prompt: str) -> str:
    if "factual claims" in prompt:
        return json.dumps({"claims": [{"claim": "bees dance", "supported": True}]})
    if prompt.startswith("Write a passage"):
        return "Honeybees dance to show the way to flowers."
    if "Judge the answer" in prompt:
        return judge_json(ANSWER, 9)
    return ANSWER


@pytest.mark.parametrize("name", list(BUILT_IN))
def test_build_strategy_gives_the_verifier_to_every_strategy_it_builds(name: str) -> None:
    v = nothing()
    strategy = presets.build_strategy(name, FakeRetriever([DOC]), FakeLLM(_script), verifier=v)
    tree = _tree(strategy)
    assert all(s.verifier is v for s in tree) and (len(tree) > 1) == (BUILT_IN[name].compose is not None)
    result = strategy.query(QUESTION)
    assert v.calls > 0 and _unsupported(result), (name, result.answer, result.citations)


def test_build_strategy_gives_it_to_a_strategy_of_your_own(tmp_path: Path) -> None:
    module = tmp_path / "mine.py"
    module.write_text(
        "from selfrag_core.config import PlainRAGConfig\n"
        "from selfrag_core.strategies import PlainRAG\n"
        "def takes(rag, llm, *, verifier=None):\n"
        "    return PlainRAG(rag, llm, PlainRAGConfig(verifier=verifier))\n"
        "def plain(rag, llm):\n"
        "    return PlainRAG(rag, llm)\n"
    )
    v = nothing()
    for factory in ("takes", "plain"):
        strategy = presets.build_strategy(
            f"{module}:{factory}", FakeRetriever([DOC]), FakeLLM(ANSWER), verifier=v
        )
        assert strategy.verifier is v


def test_build_strategy_refuses_what_is_not_a_verifier() -> None:
    with pytest.raises(TypeError, match="verifier must have verify"):
        presets.build_strategy("plain", FakeRetriever([DOC]), FakeLLM(ANSWER), verifier="strict")
    strategies = presets.default_strategies(FakeRetriever([DOC]), FakeLLM(ANSWER), verifier=(v := nothing()))
    assert all(s.verifier is v for strategy in strategies.values() for s in _tree(strategy))


def test_load_verifier_reads_a_verifier_a_class_or_a_factory(tmp_path: Path) -> None:
    module = tmp_path / "checks.py"
    module.write_text(
        "from selfrag_core.verify import LexicalVerifier\n"
        "class Strict(LexicalVerifier):\n"
        "    def __init__(self):\n"
        "        super().__init__(threshold=0.9)\n"
        "ready = LexicalVerifier(threshold=0.7)\n"
        "def make():\n"
        "    return LexicalVerifier(threshold=0.8)\n"
        "nothing = 3\n"
    )
    thresholds = [presets.load_verifier(f"{module}:{name}").threshold for name in ("Strict", "ready", "make")]
    assert thresholds == [0.9, 0.7, 0.8]
    with pytest.raises(ConfigurationError, match="gave no verifier"):
        presets.load_verifier(f"{module}:nothing")
    with pytest.raises(ConfigurationError, match="cannot load the verifier"):
        presets.load_verifier(f"{module}:missing")


def test_the_command_line_takes_a_verifier_for_every_command() -> None:
    from selfrag_core.cli.parser import build_parser

    parser = build_parser()
    for command in (["ask", "q"], ["demo"], ["eval", "q.jsonl"], ["serve"], ["mcp"]):
        assert parser.parse_args([*command, "--verifier", "checks.py:make"]).verifier == "checks.py:make"


# ----------------------------------------------------------------------------- the evaluation


def test_the_evaluation_judges_support_with_the_verifier_its_contenders_use() -> None:
    pytest.importorskip("bm25s")
    from selfrag_core.evaluation import EvalData, EvalQuestion, EvalSettings, evaluate

    data = EvalData("bees", [EvalQuestion("q1", QUESTION, ("flowers",))], corpus=None)

    def run(settings: EvalSettings) -> Any:
        return evaluate(data, ["plain"], llm=FakeLLM(ANSWER), rag=FakeRetriever([DOC]), settings=settings)

    default = run(EvalSettings()).summary()["plain"]["metrics"]
    assert default["unsupported"]["mean"] == 0.0 and default["sentence_support"]["mean"] == 1.0
    v = nothing()
    report = run(EvalSettings(verifier=v))
    metrics = report.summary()["plain"]["metrics"]
    assert metrics["unsupported"]["mean"] == 1.0 and metrics["sentence_support"]["mean"] == 0.0
    record = report.results[0]["plain"]
    assert record["metrics"]["support_score"] == 0.0 and record["signals"]["answer_supported"] == 0.0
    assert report.summary()["plain"]["verifier"]["flagged"] == 1  # what the verifier block measures
    # the harness's assess() and cite(), plain's own citations and its routing signal: one verifier
    assert v.calls == 4 and report.settings["verifier"] == "Scripted"
    assert run(EvalSettings()).settings["verifier"] == "LexicalVerifier"
    assert EvalSettings(verifier=v) == EvalSettings() and "verifier" not in repr(EvalSettings(verifier=v))
    with pytest.raises(TypeError, match="verifier must have verify"):
        EvalSettings(verifier=object())
    with pytest.raises(TypeError, match="unexpected keyword argument 'verifier'"):
        evaluate(data, ["plain"], llm=FakeLLM(ANSWER), rag=FakeRetriever([DOC]), verifier=v)


def test_selfrag_eval_verifier_judges_with_the_named_verifier(tmp_path: Path) -> None:
    pytest.importorskip("bm25s")
    from selfrag_core.cli import main

    checks = tmp_path / "checks.py"
    checks.write_text(
        "from selfrag_core.verify import Verdict\n"
        "class Nothing:\n"
        "    threshold = 0.5\n"
        "    def verify(self, sentences, passages, question=''):\n"
        "        return [[Verdict(0.0, False, j) for j in range(len(passages))] for _ in sentences]\n"
    )
    corpus, questions, out = tmp_path / "corpus.jsonl", tmp_path / "questions.jsonl", tmp_path / "out"
    corpus.write_text(json.dumps({"_id": "d1", "text": DOC}) + "\n")
    questions.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["flowers"]}) + "\n")
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--embedder", "none",
            "--strategies", "plain", "--no-cache", "--plain", "--out", str(out)]  # fmt: skip
    assert main([*args, "--verifier", f"{checks}:Nothing"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["verifier"] == "Nothing"
    # the fake model copies the document: supported word for word, but no sentence by this verifier
    assert summary["summary"]["plain"]["metrics"]["sentence_support"]["mean"] == 0.0
    assert main([*args, "--verifier", f"{checks}:missing"]) == 2  # a ConfigurationError, said plainly


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_a_verifier_given_for_one_call_checks_that_calls_citations(mode: str) -> None:
    """``{"verifier": v}`` in a query's context is that call's verifier everywhere, the
    citations of the finished result included (they were checked by the strategy's own)."""
    import asyncio

    strategy = PlainRAG(FakeRetriever([ANSWER]), FakeLLM(ANSWER + " [1]"))
    context = {"verifier": nothing()}
    if mode == "sync":
        result = strategy.query("How do honeybees find flowers?", context)
    elif mode == "async":
        result = asyncio.run(strategy.aquery("How do honeybees find flowers?", context))
    else:
        events = list(strategy.stream("How do honeybees find flowers?", context))
        result = next(e.result for e in events if e.kind == "result")
    assert result.citations and _unsupported(result) and context["verifier"].calls >= 1
    assert not _unsupported(strategy.query("How do honeybees find flowers?"))  # its own: supported


def test_a_bad_query_or_context_raises_the_same_error_with_a_per_call_setting() -> None:
    """Finishing with the strategy as the call runs it checks the query and the context
    as ``plan`` does, first: the same errors, in the same order."""
    strategy = PlainRAG(FakeRetriever([ANSWER]), FakeLLM(ANSWER))
    with pytest.raises(TypeError, match="context must be a dict or None"):
        strategy.query("How do honeybees find flowers?", ["top_k", 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="query is empty"):
        strategy.query("", {"top_k": 2})
    config = strategy.config
    assert config is not None and config.with_overrides({"top_k": config.top_k}) is config  # nothing to copy

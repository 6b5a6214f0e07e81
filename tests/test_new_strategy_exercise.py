"""The newcomer's exercise of issue 31: a new built-in strategy is its module (the strategy and
its config) and one entry of ``selfrag_core.strategies.registry.BUILT_IN``, nothing else.

The strategy here, ``Twice``, lives in this file and its entry is put in the table for each
test (monkeypatched, so the table is restored after): it is then built by name and sized by
the model profile, a ``selfrag ask --strategy`` choice, served at ``/query/twice`` and as the
OpenAI model ``selfrag-twice``, a choice of the MCP ``ask`` tool and a ``selfrag eval``
contender, without a line of the library changed. docs/how-to/custom-strategy.md shows it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import Answer, Generate, Parallel, Strategy, StrategyConfig, cli, presets, retrieve_or_empty
from selfrag_core.cli.commands import serve_app
from selfrag_core.cli.parser import build_parser, strategy_help
from selfrag_core.errors import ConfigurationError
from selfrag_core.profiles import CAPABLE, SMALL_LOCAL, ModelProfile
from selfrag_core.prompts import detect_language
from selfrag_core.strategies import registry
from selfrag_core.strategies.base import format_context
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.types import attempt_name

# ----------------------------------------------------------------------------- the new strategy


@dataclass(frozen=True)
class TwiceConfig(StrategyConfig):
    """``top_k`` documents retrieved; the second draft reads only the first ``focus`` of them."""

    top_k: int = 5
    focus: int = 2

    @classmethod
    def _sizes(cls, profile: ModelProfile, top_k: int) -> dict[str, Any]:
        # a small context window: the second draft from the best document alone
        return {"top_k": top_k, "focus": 1 if profile.small_context else 2}


def support(text: str, docs: list[Any]) -> float:
    """The share of ``text``'s words that the documents hold."""
    words = re.findall(r"\w+", text.lower())
    held = set(re.findall(r"\w+", " ".join(d.text for d in docs).lower()))
    return sum(w in held for w in words) / max(len(words), 1)


class Twice(Strategy[Answer]):
    """Retrieve; draft an answer from all the documents and one from the first ``focus``, in
    one round; keep the draft more of whose words the documents hold."""

    def __init__(
        self, rag_system: Any, llm: Any, config: TwiceConfig | None = None, *, execution: Any = None,
        prompts: Any = None,
    ) -> None:  # fmt: skip
        super().__init__(rag_system, llm, execution=execution, prompts=prompts)
        self.config = config or TwiceConfig()

    def _plan(self, query: str, context: dict[str, Any]) -> Any:
        docs = yield from retrieve_or_empty(self.rag_system, query, self.config.top_k)
        asks = [
            self.prompts.render(
                "grounded_answer", detect_language(query), context=format_context(d), question=query
            )
            for d in (docs, docs[: self.config.focus])
        ]
        replies = yield Parallel(tuple(Generate(self.llm, ask, "answer") for ask in asks))
        drafts = [r.text.strip() for r in replies if not isinstance(r, BaseException)]
        best = max(drafts, key=lambda d: support(d, docs), default="There is not enough information.")
        return Answer(best, docs, {"drafts": drafts})


#: the one entry a newcomer adds to BUILT_IN
ENTRY = registry.BuiltIn(Twice, TwiceConfig, "keeps the better supported of two drafts")


@pytest.fixture
def twice(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(registry.BUILT_IN, "twice", ENTRY)
    return "twice"


# ----------------------------------------------------------------------------- what it then is

PARIS = "Paris is the capital of France."
RHINE = "The Rhine flows through Basel and Cologne."
DOCS = [PARIS, RHINE, "Berlin is the capital of Germany."]


def test_without_its_entry_there_is_no_such_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    rag, llm = FakeRetriever(DOCS), FakeLLM()
    with monkeypatch.context() as patch:
        patch.setitem(registry.BUILT_IN, "twice", ENTRY)
        assert isinstance(presets.build_strategy("twice", rag, llm), Twice)
    assert "twice" not in registry.BUILT_IN  # restored
    with pytest.raises(ConfigurationError, match="unknown strategy 'twice'; choose one of plain, self"):
        presets.build_strategy("twice", rag, llm)
    assert "twice" not in strategy_help() and attempt_name("Twice") == "plain retrieval"


def test_it_is_built_by_name_and_sized_by_the_model_profile(twice: str) -> None:
    rag, llm = FakeRetriever(DOCS), FakeLLM()
    small = presets.build_strategy(twice, rag, llm)  # the CLI's default: the small profile, top_k 3
    assert isinstance(small, Twice) and small.config == TwiceConfig(top_k=3, focus=1, quotes=True)
    assert small.config == TwiceConfig.for_profile(SMALL_LOCAL, top_k=3)
    assert (
        small.execution.max_llm_calls == 12 and small.execution.query_timeout == presets.DEFAULT_QUERY_TIMEOUT
    )
    assert small.prompts.cite is False  # a small model is not told to cite [n]
    standard = presets.build_strategy(twice, rag, llm, preset="standard", top_k=None)
    assert standard.config == TwiceConfig(top_k=5, focus=2) == TwiceConfig.for_profile(CAPABLE)
    assert standard.prompts.cite is True
    # it answers: two drafts in one round, the supported one kept
    script = FakeLLM(lambda p: "Paris is the capital of France." if RHINE not in p else "Rome, surely.")
    result = presets.build_strategy(twice, FakeRetriever(DOCS), script, preset="standard").query(
        "What is the capital of France?"
    )
    assert result.details["drafts"] == ["Rome, surely.", PARIS] and result.answer == PARIS
    assert result.trace.llm_calls == 2 and result.trace.retrievals == 1
    assert attempt_name("Twice") == "twice"  # a SelfHealingRAG attempt's name in the summaries


def _index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    pytest.importorskip("bm25s")
    notes = tmp_path / "notes.md"
    notes.write_text(f"{PARIS} {RHINE}\n", encoding="utf-8")
    index = tmp_path / "index"
    assert cli.main(["index", str(notes), "--index", str(index), "--embedder", "hashing"]) == 0
    capsys.readouterr()
    return index


def test_it_is_a_choice_of_selfrag_ask(
    twice: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = _index(tmp_path, capsys)
    assert strategy_help().endswith(
        "drafts (plain, and drafts over single documents in one round), "
        "twice (keeps the better supported of two drafts), or your own: package.module:Name or file.py:Name"
    )
    question = "What is the capital of France?"
    assert (
        cli.main(["ask", question, "--strategy", twice, "--llm", "fake", "--index", str(index), "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert len(out["drafts"]) == 2 and out["answer"] in out["drafts"]
    assert out["answer"].startswith("Paris is the capital of France")
    assert out["trace"]["llm_calls"] == 2


async def test_it_is_served_and_an_openai_model(
    twice: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    index = _index(tmp_path, capsys)
    args = build_parser().parse_args(["serve", "--llm", "fake", "--index", str(index)])
    app = serve_app(args)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://selfrag", timeout=30) as client:
        answered = await client.post("/query/twice", json={"question": "What is the capital of France?"})
        models = await client.get("/v1/models")
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "selfrag-twice", "messages": [{"role": "user", "content": "Capital of France?"}]},
        )
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert len(body["drafts"]) == 2 and body["answer"].startswith("Paris is the capital of France")
    ids = [m["id"] for m in models.json()["data"]]
    assert ids == [f"selfrag-{name}" for name in registry.BUILT_IN] and ids[-1] == "selfrag-twice"
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"].startswith("Paris is the capital of France")


async def test_it_is_a_choice_of_the_mcp_ask_tool(
    twice: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from selfrag_core import mcp_server

    index = _index(tmp_path, capsys)
    served: list[Any] = []
    monkeypatch.setattr(mcp_server, "run_stdio", served.append)  # `selfrag mcp` builds, then serves
    assert cli.main(["mcp", "--llm", "fake", "--index", str(index)]) == 0
    async with Client(served[0], cache=None) as client:
        listed = await client.list_tools()
        ask = next(t for t in listed.tools if t.name == "ask")
        assert ask.input_schema["properties"]["strategy"]["enum"][-2:] == ["drafts", twice]
        called = await client.call_tool(
            "ask", {"question": "What is the capital of France?", "strategy": twice}
        )
    answer = json.loads(called.content[0].text)
    assert not called.is_error and answer["strategy"] == twice
    assert answer["answer"].startswith("Paris is the capital of France") and answer["cost"]["llm_calls"] == 2


def test_it_is_a_selfrag_eval_contender(twice: str) -> None:
    from selfrag_core.evaluation import EvalQuestion, EvalSettings, evaluate

    # the reader answers from the first document of its prompt, wrongly when the second is there
    llm = FakeLLM(lambda p: "Lyon." if RHINE in p else "Paris.")
    questions = [EvalQuestion("q1", "What is the capital of France?", ("Paris",))]
    standard = EvalSettings(preset="standard")
    report = evaluate(questions, ["plain", twice], llm=llm, rag=FakeRetriever(DOCS), settings=standard)
    assert report.contenders == ["plain", twice]
    plain, mine = report.results[0]["plain"], report.results[0][twice]
    assert plain["answer"] == "Lyon." and mine["answer"] == "Paris."  # the supported draft kept
    assert mine["metrics"]["em"] == 1.0 > plain["metrics"]["em"]
    assert report.summary()[twice]["llm_calls"] == 2 and report.summary()[twice]["errors"] == 0

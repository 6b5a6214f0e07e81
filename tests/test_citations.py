"""Citations: markers read, checked against the cited sources, attributed where the model
cites nothing, odd markers flagged and kept; English and Arabic; on every strategy's result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fault_helpers import STRATEGIES, ask, build

from selfrag_core import ExecutionConfig, PlainRAG
from selfrag_core.citations import cite, renumber, supported_share, without_markers
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.types import RetrievedDoc

SOURCES = [
    RetrievedDoc("Paris is the capital of France."),
    RetrievedDoc("The Seine flows through Paris."),
    RetrievedDoc("Berlin is the capital of Germany."),
]
AR_SOURCES = [RetrievedDoc("باريس هي عاصمة فرنسا."), RetrievedDoc("برلين هي عاصمة ألمانيا.")]


def brief(
    answer: str, sources: list[RetrievedDoc] = SOURCES
) -> list[tuple[str, list[int], list[int], bool, list[str]]]:
    return [(c.sentence, c.cited, c.supported_by, c.attributed, c.flags) for c in cite(answer, sources)]


def test_correct_citations_are_read_and_confirmed() -> None:
    assert brief("Paris is the capital of France [1]. The Seine flows through it [2].") == [
        ("Paris is the capital of France.", [1], [1], False, []),
        ("The Seine flows through it.", [2], [2], False, []),
    ]
    # a marker after the full stop belongs to the sentence before it; lists and runs of markers
    assert brief("Berlin is the capital of Germany. [1, 3] Paris is the capital of France [1][2].") == [
        ("Berlin is the capital of Germany.", [1, 3], [3], False, []),
        ("Paris is the capital of France.", [1, 2], [1], False, []),
    ]


def test_a_wrong_citation_is_flagged_unsupported() -> None:
    [(_, cited, supported, attributed, flags)] = brief("Berlin is the capital of Germany [1].")
    assert cited == [1] and supported == [] and flags == ["unsupported"] and not attributed


def test_missing_citations_are_attributed_to_the_best_source() -> None:
    citations = cite("The Seine flows through Paris. The moon is made of cheese.", SOURCES)
    assert [(c.supported_by, c.attributed, c.flags) for c in citations] == [
        ([2], True, []),
        ([], True, ["unsupported"]),
    ]
    assert supported_share(citations) == 0.5 and citations[0].support == 1.0


@pytest.mark.parametrize(
    ("answer", "flag"),
    [
        ("Paris is the capital of France [7].", "no_such_source:[7]"),
        ("Paris is the capital of France 【1】.", "odd_marker:【1】"),
        ("Paris is the capital of France (1).", "odd_marker:(1)"),
        ("Paris is the capital of France [^1].", "odd_marker:[^1]"),
    ],
)
def test_malformed_markers_are_flagged_and_kept_visible(answer: str, flag: str) -> None:
    [citation] = cite(answer, SOURCES)
    assert flag in citation.flags
    assert citation.attributed and citation.supported_by == [1]  # no valid marker: attributed
    if "[7]" not in answer:
        assert flag.split(":", 1)[1] in citation.sentence  # the odd marker stays in the text


def test_markers_inside_code_are_code() -> None:
    [citation] = cite("Index it with `items[2]` as in Paris is the capital of France.", SOURCES)
    assert citation.cited == [] and "`items[2]`" in citation.sentence


@pytest.mark.parametrize("answer", ["", "   ", "[1]", "...", "```\ncode [1]\n```"])
def test_answers_without_sentences_have_no_citations(answer: str) -> None:
    assert cite(answer, SOURCES) == [] and supported_share([]) is None


def test_sources_without_text_and_no_sources_never_raise() -> None:
    assert brief("Paris is the capital of France [1].", []) == [
        ("Paris is the capital of France.", [], [], True, ["no_such_source:[1]", "unsupported"])
    ]


def test_arabic_citations() -> None:
    assert brief("باريس هي عاصمة فرنسا [1]. برلين هي عاصمة ألمانيا [1]؟", AR_SOURCES) == [
        ("باريس هي عاصمة فرنسا.", [1], [1], False, []),
        ("برلين هي عاصمة ألمانيا؟", [1], [], False, ["unsupported"]),
    ]
    [attributed] = cite("وباريس عاصمة فرنسا", AR_SOURCES)  # a proclitic و: still supported by source 1
    assert attributed.attributed and attributed.supported_by == [1]


def cited_answers(prompt: str) -> str:
    if '"claims"' in prompt:
        return json.dumps({"claims": [{"claim": "Paris", "supported": True}]})
    if '"relevance"' in prompt:
        scores = dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 10)
        return json.dumps(
            {"answer": "Paris is the capital of France [1].", **scores, "issues": [], "suggestions": []}
        )
    if "Write a passage" in prompt:
        return "The capital of France is Paris, a large city on the river Seine in Europe."
    return "Paris is the capital of France [1]. Rome is the capital of Italy [2]."


@pytest.mark.parametrize("name", [*STRATEGIES, "plain"])
async def test_every_strategy_result_carries_the_citations_of_its_answer(name: str) -> None:
    backend = FakeRetriever([d.text for d in SOURCES])
    llm = FakeLLM(cited_answers)
    strategy: Any = (
        PlainRAG(backend, llm) if name == "plain" else build(name, backend, llm, ExecutionConfig())
    )
    result = await ask(strategy, "async")
    citations = result.citations
    assert citations, result.answer
    first = citations[0]
    assert first.sentence.startswith("Paris is the capital of France") and first.supported_by
    assert result.sources[first.supported_by[0] - 1].text == "Paris is the capital of France."
    if len(citations) > 1:  # Rome is in no source: flagged
        assert "unsupported" in citations[1].flags
    assert result.to_dict()["citations"][0]["sentence"] == first.sentence


def test_a_refusal_or_a_fallback_answer_has_no_citations() -> None:
    backend = FakeRetriever([d.text for d in SOURCES])
    refused = PlainRAG(backend, FakeLLM("The documents give no information about a king.")).query(
        "Who is the king?"
    )
    assert refused.citations == []
    nothing = PlainRAG(backend, FakeLLM("unused")).query("zebra quantum lattice")
    assert nothing.citations == []


def test_recursive_merged_answer_cites_the_merged_sources() -> None:
    from selfrag_core import RecursiveRAG, RecursiveRAGConfig
    from selfrag_core.testing import first_document

    docs = [
        "Climate change is caused by greenhouse gas emissions.",
        "Effects of climate change include rising seas.",
        "Deforestation is the clearing of forests.",
    ]
    subs = [
        "What causes climate change?",
        "What are the effects of climate change?",
        "What is deforestation?",
    ]

    def model(prompt: str) -> str:
        if "SUBQUESTIONS:" in prompt:
            return json.dumps({"items": subs})
        if "Combine the answers" in prompt:  # copies the sub-answers, markers and all
            return " ".join(
                line.removeprefix("Answer: ") for line in prompt.splitlines() if line.startswith("Answer: ")
            )
        return first_document(prompt) + " [1]"  # every sub-answer cites its own first document

    question = "What are the causes and effects of climate change, and how do they compare to deforestation?"
    result = RecursiveRAG(FakeRetriever(docs), FakeLLM(model), RecursiveRAGConfig(top_k=1)).query(question)
    assert result.decomposed and [s.answer[-3:] for s in result.sub_answers] == ["[1]", "[2]", "[3]"]
    assert [(c.cited, c.supported_by) for c in result.citations] == [([1], [1]), ([2], [2]), ([3], [3])]
    assert [d.text for d in result.sources] == docs


def test_the_small_preset_leaves_out_the_instruction_to_cite() -> None:
    from selfrag_core.presets import build_strategy
    from selfrag_core.prompts import Prompts, ar, en

    for lang, module in (("en", en), ("ar", ar)):
        for name in ("grounded_answer", "refine", "answer_and_evaluate", "healing_answer"):
            assert module.CITE in Prompts().get(name, lang).template
            assert module.CITE not in Prompts(cite=False).get(name, lang).template
    mine = {"grounded_answer": "Mine: {context} {question}"}
    assert Prompts(Prompts(mine), cite=False).get("grounded_answer").template == mine["grounded_answer"]
    backend = FakeRetriever([d.text for d in SOURCES])
    for preset, cites in (("small", False), ("standard", True)):
        for name in ("plain", "self", "hyde", "recursive", "healing"):
            llm = FakeLLM(cited_answers)
            build_strategy(name, backend, llm, preset=preset).query("What is the capital of France?")
            answering = [
                c.prompt for c in llm.calls if "Question:" in c.prompt and "Passage:" not in c.prompt
            ]
            assert answering and all((en.CITE in p) is cites for p in answering), (preset, name)


@pytest.mark.parametrize("marker", ["[0]", "[999]", "[1000]", "[12345]", "[-1]", "[" + "9" * 5000 + "]"])
def test_a_bracketed_integer_naming_no_source_is_flagged_and_removed(marker: str) -> None:
    [citation] = cite(f"Paris is the capital of France {marker}.", SOURCES)
    assert citation.flags == [f"no_such_source:{marker}"]
    assert citation.sentence == "Paris is the capital of France."  # removed like the other bad markers
    assert citation.cited == [] and citation.attributed and citation.supported_by == [1]


@pytest.mark.parametrize(
    ("answer", "cited"),
    [
        ("Paris is the capital of France [[1]].", [1]),
        ("Paris is the capital of France [[1], [2]].", [1, 2]),
        ("Paris is the capital of France ([1]).", [1]),
        ("Paris is the capital of France [1][2].", [1, 2]),
        ("Paris is the capital of France [1, 2].", [1, 2]),
        ("Paris is the capital of France [1], [2].", [1, 2]),
        ("Paris is the capital of France ([1], [2]).", [1, 2]),
        ("Paris is the capital of France. [[1]]", [1]),  # after the full stop: still its marker
        ("Paris is the capital of France. ([1])", [1]),
    ],
)
def test_nested_and_adjacent_markers_leave_no_debris(answer: str, cited: list[int]) -> None:
    [citation] = cite(answer, SOURCES)
    assert (citation.sentence, citation.cited, citation.flags) == (
        "Paris is the capital of France.",
        cited,
        [],
    )
    assert without_markers(answer) == "Paris is the capital of France."


def test_brackets_around_more_than_markers_are_the_model_s_text() -> None:
    [citation] = cite("Paris is the capital (of France [1]).", SOURCES)
    assert citation.sentence == "Paris is the capital (of France)." and citation.cited == [1]


def test_renumber_leaves_markers_naming_no_source_as_written() -> None:
    huge = "[" + "9" * 5000 + "]"
    assert (
        renumber(f"Paris [1] and [[2]], not [-1] {huge}.", {1: 4, 2: 5})
        == f"Paris [4] and [[5]], not [-1] {huge}."
    )

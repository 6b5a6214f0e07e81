"""A result in words (answer, quality, sources, citations, usage) and a query's steps as they happen."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from selfrag_core.display import one_line, score_label, snippet, step_text
from selfrag_core.errors import StrategyError
from selfrag_core.progress import Progress
from selfrag_core.runner import run_query, step_of
from selfrag_core.types import GENERATION_FAILED_ANSWER, NO_INFORMATION_ANSWERS, Result
from selfrag_core.verify import verify_answer

#: what a trace's note says a strategy did to the model's answer, in a reader's words
_DID = {
    "answer_quoted": "a source's own sentence in place of the model's answer (the choice check preferred it)",
    "draft_chosen": "a draft written from one source in place of the answer over all",
    "answer_rejected": "the model's answer was unusable",
    "rule_replaced": "a rule replaced the model's answer",
    "incomplete_answer": "a part of the question the answer left out answered on its own",
    "not_in_documents": "the documents found do not speak to the question",
}


def run_strategy(strategy: Any, question: str, context: Mapping[str, Any] | None = None) -> Any:
    """The strategy's result object (SelfHealingRAG's report when every attempt failed);
    ``context``: the query's options (a ``metadata_filter``)."""
    try:
        return run_query(strategy, question, context)
    except StrategyError as e:
        if e.report is None:
            raise
        return e.report


def step_lines(progress: Progress) -> Callable[[Any], None]:
    """A trace listener (:func:`~selfrag_core.engine.observe_trace`) that says each step of
    a query (:func:`~selfrag_core.runner.step_of`) on stderr as it happens."""

    def say(event: Any) -> None:
        step = step_of(event)
        if step is not None:
            progress.say(f"- {step_text(step)}")

    return say


def _sources(result: Result[Any], limit: int = 10, question: str = "") -> list[str]:
    """The result's documents as numbered in its prompt (what ``[n]`` markers point to):
    each with its file, its score and the score's kind, and the part of its text that
    matched ``question`` (the start when none did)."""
    lines = []
    for doc in result.documents[:limit]:
        source = doc.source or "?"
        label = score_label(doc)
        score = f" ({label})" if label else ""
        lines.append(f"{source}{score}: {snippet(doc.text, question, 100)}")
    return lines


def _citations(result: Result[Any]) -> list[str]:
    """How far sources support the answer's sentences, and the ones none supports."""
    citations = result.citations
    if not citations:
        return []
    supported = sum(1 for c in citations if c.supported)
    cited = sum(1 for c in citations if c.cited)
    lines = [
        f"Citations: {supported} of {len(citations)} sentence(s) supported by a source "
        f"({cited} cited by the model, {len(citations) - cited} attributed)"
    ]
    lines += [f"  unsupported: {one_line(c.sentence, 100)}" for c in citations if not c.supported]
    return lines


def _usage(result: Any) -> str:
    t = result.trace
    tokens = f"{t.input_tokens} in, {t.output_tokens} out"
    return f"LLM calls: {t.llm_calls}; tokens: {tokens}; time: {t.wall_s:.1f} s"


def checked_line(result: Any, question: str, verifier: Any = None, plain: Any = None) -> str:
    """What the checks say of ``result``'s answer and what its strategy did to the model's,
    on one line: the verifier's support score (``flagged`` under its threshold: the score
    that ``supported`` rests on in every result), the fitted support probability, the
    answering probability, each of the trace's notes that changed the
    answer (:data:`_DID`), and, given ``plain`` (PlainRAG's result for the same question),
    whether the answer is plain's; "" for a result without an answer."""
    if result.no_answer is not None or not result.answer.strip():
        return ""
    verdict = verify_answer(result.answer, [d.text for d in result.documents], verifier, question)
    parts = []
    if verdict.score is not None:  # the score the supported flag rests on, everywhere (eval, HTTP, MCP)
        under = f" (flagged: under {verdict.threshold:.2f}, not supported by the sources)"
        flag = "" if verdict.supported else under
        parts.append(f"support {verdict.score:.2f}{flag}")
    if verdict.probability is not None:
        parts.append(f"fitted support {verdict.probability:.2f}")
    if verdict.informativeness is not None:
        parts.append(f"answers the question {verdict.informativeness:.2f}")
    names = [e.name for e in result.trace.events]
    parts += [did for name, did in _DID.items() if name in names]
    if plain is not None and plain is not result:
        same = " ".join(plain.answer.split()) == " ".join(result.answer.split())
        parts.append("the same answer as plain" if same else "a different answer from plain's")
    return "; ".join(parts)


def print_result(result: Result[Any], question: str = "", verifier: Any = None) -> None:
    print(result.answer.strip() or "(no answer)")
    print()
    quality = result.summary()
    if quality:
        print(quality[0].upper() + quality[1:])
    checked = checked_line(result, question, verifier)
    if checked:
        print(f"Checked: {checked}")
    sources = _sources(result, question=question)
    if sources:
        print("Sources:")
        for i, line in enumerate(sources, 1):
            print(f"  [{i}] {line}")
    for line in _citations(result):
        print(line)
    print(_usage(result))


def unanswered(result: Any) -> str | None:
    """Why no answer could be generated, or None when the result holds an answer: the
    answer is empty, the generation-failed fallback, or a no-information fallback that
    failures (not an index without the answer) led to. The reason is the trace's last
    LLM or retrieval error."""
    answer = result.answer.strip()
    events = result.trace.events
    errors: list[str] = [e.error for e in events if e.error and e.kind in ("llm", "retrieval")]
    if answer not in ("", GENERATION_FAILED_ANSWER) and not (answer in NO_INFORMATION_ANSWERS and errors):
        return None
    notes: list[str] = [e.error for e in events if e.error]
    return (errors or notes or ["the strategy produced no answer"])[-1]

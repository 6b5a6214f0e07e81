"""Evaluation questions (and the documents that came with them) read from files.

Three formats: JSONL (one question per line), a BEIR folder (``corpus.jsonl``,
``queries.jsonl``, ``qrels/<split>.tsv``) and SQuAD v1.1 JSON. Every loader reads what
it can: a bad line or entry (not UTF-8, not JSON, JSON nested too deeply or with an
integer too long to read, a wrong field) is skipped and recorded as an
:class:`InputProblem` saying where it is and what to write instead. A file that cannot
be read at all (missing, a directory, not readable, not UTF-8 anywhere, no valid
question) raises :class:`ConfigurationError`. JSON is read by
:func:`selfrag_core.parsing.load_json`, as the store reads its own.
"""

from __future__ import annotations

import codecs
import difflib
import json
import logging
import math
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from selfrag_core.errors import ConfigurationError
from selfrag_core.parsing import load_json
from selfrag_core.validation import check_int

logger = logging.getLogger("selfrag")

T = TypeVar("T")

#: the fields of a JSONL question line
JSONL_FIELDS = ("id", "question", "answers", "relevant", "decision")
#: the gold decisions of a yes/no question
DECISIONS = ("yes", "no", "maybe")


@dataclass(frozen=True)
class EvalQuestion:
    """A question, its gold answers (may be empty) and its relevance judgements:
    document id or source -> graded relevance (> 0 = relevant; empty = unknown)."""

    id: str
    question: str
    answers: tuple[str, ...] = ()
    relevant: Mapping[str, float] = field(default_factory=dict, hash=False)
    #: the gold decision of a yes/no question (:data:`DECISIONS`), or None
    decision: str | None = None


@dataclass(frozen=True)
class CorpusDoc:
    """A document that came with the questions (a BEIR corpus line, a SQuAD paragraph)."""

    id: str
    text: str
    title: str = ""


@dataclass(frozen=True)
class InputProblem:
    """A skipped line or entry: ``where`` ("questions.jsonl:12") and what to do about it."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class EvalData:
    """The questions of one data set, its documents when it has them (else ``None``),
    and the lines that were skipped, with why."""

    name: str
    questions: list[EvalQuestion]
    corpus: list[CorpusDoc] | None = None
    problems: list[InputProblem] = field(default_factory=list)

    def has_answers(self) -> bool:
        return any(q.answers for q in self.questions)

    def has_relevance(self) -> bool:
        return any(q.relevant for q in self.questions)

    def has_decisions(self) -> bool:
        return any(q.decision for q in self.questions)

    def sample(self, limit: int | None, seed: int = 0) -> EvalData:
        """``limit`` questions drawn with ``seed``, kept in file order (all when
        ``limit`` is None or not below their number); corpus and problems unchanged."""
        check_limit(limit)
        chosen: Sequence[int] = range(len(self.questions))
        if limit is not None and limit < len(self.questions):
            chosen = sorted(random.Random(seed).sample(chosen, limit))
        return EvalData(self.name, [self.questions[i] for i in chosen], self.corpus, list(self.problems))


def check_limit(limit: object) -> int | None:
    """``limit`` (a number of questions) when it is None or an int of at least 1, else a
    ConfigurationError (a ``ValueError``)."""
    if limit is None:
        return None
    number = check_int("limit", limit, None)
    if number < 1:
        raise ConfigurationError(f"limit must be at least 1 (or None for all questions), got {number}")
    return number


def load_questions(path: str | os.PathLike[str], *, split: str = "test") -> EvalData:
    """Load a folder as BEIR, a ``.json`` file holding SQuAD JSON as SQuAD, anything
    else as JSONL. ``split`` picks the BEIR qrels file."""
    path = Path(path)
    if path.is_dir():
        return load_beir(path, split=split)
    if path.suffix.lower() == ".json":
        data = _read_bytes(path)
        try:
            top = load_json(data.decode("utf-8-sig"))
        except ValueError:  # not UTF-8, not one JSON value: perhaps JSONL named .json
            top = None  # load_jsonl says what is wrong, line by line
        if isinstance(top, dict) and isinstance(top.get("data"), list):
            return _squad(path, top)
    return load_jsonl(path)


def load_jsonl(path: str | os.PathLike[str]) -> EvalData:
    """One JSON object per line: ``question`` (required), ``answers`` (a list of
    strings), ``relevant`` (a list of ids, or an object id -> grade), ``id``,
    ``decision`` (a yes/no question's gold decision: yes, no or maybe)."""
    path = Path(path)
    seen: dict[str, str] = {}

    def parse(number: int, line: dict[str, Any]) -> EvalQuestion:
        unknown = [key for key in line if key not in JSONL_FIELDS]
        if unknown:
            raise _Skip(_unknown_field(unknown[0], JSONL_FIELDS))
        question = _text(line, "question")
        answers = _answers(line.get("answers", []), "answers")
        relevant = _relevant(line.get("relevant", {}))
        qid = _unique(
            seen, _id(line, "id", default=f"q{number}"), f"line {number}", "give each question its own id"
        )
        return EvalQuestion(qid, question, answers, relevant, _decision(line.get("decision")))

    problems: list[InputProblem] = []
    questions = _read_jsonl(path, parse, problems)
    return EvalData(path.stem, _some(questions, "questions", path, problems), None, problems)


def load_beir(folder: str | os.PathLike[str], *, split: str = "test") -> EvalData:
    """A BEIR folder: the queries judged in ``qrels/<split>.tsv`` (all queries, without
    judgements, when there is no qrels folder), gold answers from a query's
    ``metadata.answers``, and the corpus."""
    folder = Path(folder)
    layout = "a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
    for needed in (folder / "corpus.jsonl", folder / "queries.jsonl"):
        if not needed.is_file():
            raise ConfigurationError(f"{needed}: no such file; {layout}")
    problems: list[InputProblem] = []
    corpus = load_corpus(folder / "corpus.jsonl", problems=problems)
    seen: dict[str, str] = {}

    def parse(number: int, line: dict[str, Any]) -> EvalQuestion:
        text = _text(line, "text")
        metadata = line.get("metadata")
        answers: tuple[str, ...] = ()
        if isinstance(metadata, dict) and "answers" in metadata:
            answers = _answers(metadata["answers"], "metadata.answers")
        qid = _unique(seen, _beir_id(line), f"line {number}", "give each query its own id")
        return EvalQuestion(qid, text, answers)

    queries = _read_jsonl(folder / "queries.jsonl", parse, problems)
    qrels = _read_qrels(folder, split, problems)
    if qrels is not None:
        queries = [
            replace(q, relevant={doc: grade for doc, grade in qrels[q.id].items() if grade > 0})
            for q in queries
            if q.id in qrels
        ]
    return EvalData(folder.name, _some(queries, "questions", folder, problems), corpus, problems)


def load_corpus(
    path: str | os.PathLike[str], *, problems: list[InputProblem] | None = None
) -> list[CorpusDoc]:
    """A BEIR-style ``corpus.jsonl``: ``{"_id", "title", "text"}`` per line (``"id"``
    accepted too). Bad lines are skipped: appended to ``problems`` when given, else
    logged as a warning."""
    path = Path(path)
    seen: dict[str, str] = {}

    def parse(number: int, line: dict[str, Any]) -> CorpusDoc:
        text, title = line.get("text"), line.get("title") or ""
        if not isinstance(text, str):
            _fail("text", line, "write the document text as a string")
        if not isinstance(title, str):
            _fail("title", line, "write the title as a string")
        return CorpusDoc(
            _unique(seen, _beir_id(line), f"line {number}", "give each document its own id"), text, title
        )

    found: list[InputProblem] = []
    docs = _some(_read_jsonl(path, parse, found), "documents", path, found)
    if problems is not None:
        problems.extend(found)
    elif found:
        logger.warning("%s: skipped %d bad line(s); the first: %s", path, len(found), found[0])
    return docs


def load_squad(path: str | os.PathLike[str]) -> EvalData:
    """SQuAD v1.1 JSON: each paragraph becomes a document ``"<title>#<index>"``, each of
    its questions gets the distinct answer texts and that paragraph as relevant."""
    path = Path(path)
    text = _read_text(path)
    try:
        top = load_json(text)
    except ValueError as e:
        raise ConfigurationError(
            f"{path}: not valid JSON ({_json_problem(e, at_line=True)}); write SQuAD v1.1 JSON"
        ) from e
    return _squad(path, top)


# -- internals ---------------------------------------------------------------------


class _Skip(Exception):
    """What is wrong with one line or entry; it is skipped and becomes an InputProblem."""


@contextmanager
def _skipped_into(problems: list[InputProblem], where: str) -> Iterator[None]:
    """Run the block; a :class:`_Skip` inside it is recorded in ``problems``."""
    try:
        yield
    except _Skip as e:
        problems.append(InputProblem(where, str(e)))


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, or a ConfigurationError saying why it cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise ConfigurationError(f"{path}: no such file; check the path") from e
    except IsADirectoryError as e:
        raise ConfigurationError(f"{path}: a directory, not a file; give the path of the file") from e
    except OSError as e:
        raise ConfigurationError(
            f"{path}: cannot be read ({e.strerror or e}); check the path and its permissions"
        ) from e


def _read_text(path: Path) -> str:
    try:
        return _read_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigurationError(f"{path}: {_not_utf8(e)}; save the file as UTF-8") from e


def _not_utf8(e: UnicodeDecodeError) -> str:
    return f"not UTF-8 text (byte {e.start} cannot be decoded)"


def _lines(path: Path, problems: list[InputProblem], label: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of each non-blank line. Split on newlines only:
    JSON strings may hold U+2028, which ``str.splitlines`` would split on. A line that is
    not UTF-8 is recorded in ``problems`` as "<label>:<line>"; a file without a single
    UTF-8 line is a ConfigurationError."""
    data = _read_bytes(path)
    try:
        lines: list[str | UnicodeDecodeError] = list(data.decode("utf-8-sig").split("\n"))
    except UnicodeDecodeError as e:  # UTF-8 never holds a newline byte inside a character
        lines = [_decoded(raw) for raw in data.removeprefix(codecs.BOM_UTF8).split(b"\n")]
        if not any(isinstance(line, str) and line.strip() for line in lines):
            raise ConfigurationError(f"{path}: {_not_utf8(e)}; save the file as UTF-8") from e
    del data  # one copy of a large corpus in memory while it is read: its lines
    for number, line in enumerate(lines, start=1):
        if isinstance(line, UnicodeDecodeError):
            problems.append(InputProblem(f"{label}:{number}", f"{_not_utf8(line)}; save the file as UTF-8"))
        elif line.strip():
            yield number, line.rstrip("\r")


def _decoded(raw: bytes) -> str | UnicodeDecodeError:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e


def _read_jsonl(
    path: Path, parse: Callable[[int, dict[str, Any]], T], problems: list[InputProblem]
) -> list[T]:
    """``parse(line number, object)`` of each JSON-object line; blank lines are skipped,
    bad ones recorded in ``problems`` as "<file name>:<line>"."""
    items: list[T] = []
    for number, line in _lines(path, problems, path.name):
        with _skipped_into(problems, f"{path.name}:{number}"):
            try:
                value = load_json(line)
            except ValueError as e:
                raise _Skip(f"not valid JSON ({_json_problem(e)}); write one JSON object per line") from e
            if not isinstance(value, dict):
                raise _Skip(f"a JSON {_json_type(value)}, not an object; write one JSON object per line")
            items.append(parse(number, value))
    return items


def _read_qrels(folder: Path, split: str, problems: list[InputProblem]) -> dict[str, dict[str, float]] | None:
    """query id -> {document id: grade} from ``qrels/<split>.tsv``; None without a qrels folder."""
    path = folder / "qrels" / f"{split}.tsv"
    if not path.is_file():
        if path.parent.is_dir():
            splits = ", ".join(sorted(p.stem for p in path.parent.glob("*.tsv"))) or "none"
            raise ConfigurationError(f"{path}: no such file; the splits in {path.parent} are: {splits}")
        return None
    qrels: dict[str, dict[str, float]] = {}
    for number, line in _lines(path, problems, f"qrels/{path.name}"):
        columns = line.split("\t")
        if number == 1 and columns[0] == "query-id":
            continue  # the header
        with _skipped_into(problems, f"qrels/{path.name}:{number}"):
            if len(columns) != 3:
                raise _Skip(
                    f"{len(columns)} tab-separated column(s); write three: query-id, corpus-id, score"
                )
            query_id, doc_id, score = columns
            try:
                grade = float(score)
            except ValueError:
                grade = math.nan
            if not math.isfinite(grade):
                raise _Skip(f'score "{_clip(score)}" is not a number; write a relevance grade such as 1')
            qrels.setdefault(query_id, {})[doc_id] = grade
    return qrels


def _squad(path: Path, top: Any) -> EvalData:
    if not (isinstance(top, dict) and isinstance(top.get("data"), list)):
        raise ConfigurationError(
            f'{path}: not SQuAD JSON; expected an object with a "data" list of articles, '
            '{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers"}]}]}'
        )
    problems: list[InputProblem] = []
    questions: list[EvalQuestion] = []
    corpus: list[CorpusDoc] = []
    seen_docs: dict[str, str] = {}
    seen_questions: dict[str, str] = {}
    for a, article in enumerate(top["data"]):
        at_article = f"data[{a}]"
        with _skipped_into(problems, f"{path.name}: {at_article}"):
            title = _text(_object(article, "article"), "title")
            for p, paragraph in enumerate(_list(article, "paragraphs")):
                at_paragraph = f"{at_article}.paragraphs[{p}]"
                with _skipped_into(problems, f"{path.name}: {at_paragraph}"):
                    context = _text(_object(paragraph, "paragraph"), "context")
                    qas = _list(paragraph, "qas")
                    doc_id = _unique(
                        seen_docs, f"{title}#{p}", at_paragraph, "give each article its own title"
                    )
                    corpus.append(CorpusDoc(doc_id, context, title))
                    for q, qa in enumerate(qas):
                        at_question = f"{at_paragraph}.qas[{q}]"
                        with _skipped_into(problems, f"{path.name}: {at_question}"):
                            questions.append(_squad_question(qa, doc_id, seen_questions, at_question))
    return EvalData(path.stem, _some(questions, "questions", path, problems), corpus, problems)


def _squad_question(qa: Any, doc_id: str, seen: dict[str, str], where: str) -> EvalQuestion:
    question = _text(_object(qa, "question entry"), "question")
    answers = qa.get("answers", [])
    if not isinstance(answers, list) or not all(
        isinstance(a, dict) and isinstance(a.get("text"), str) and a["text"].strip() for a in answers
    ):
        raise _Skip(
            'field "answers" must be a list of objects with a non-empty "text", '
            'e.g. [{"text": "Denver Broncos", "answer_start": 177}]'
        )
    qid = _unique(seen, _id(qa, "id"), where, "give each question its own id")
    return EvalQuestion(qid, question, tuple(dict.fromkeys(a["text"] for a in answers)), {doc_id: 1.0})


def _json_problem(e: ValueError, *, at_line: bool = False) -> str:
    """What :func:`load_json` found wrong, and where (``at_line``: the line too)."""
    if not isinstance(e, json.JSONDecodeError):
        return str(e)  # nested too deeply, an integer too long
    return f"{e.msg} at {f'line {e.lineno}, ' if at_line else ''}column {e.colno}"


def _some(items: list[T], what: str, path: Path, problems: list[InputProblem]) -> list[T]:
    """``items``, or a ConfigurationError naming the file and its first problems."""
    if items:
        return items
    detail = "; ".join(str(p) for p in problems[:3]) if problems else "it holds none"
    more = f" (and {len(problems) - 3} more problems)" if len(problems) > 3 else ""
    raise ConfigurationError(f"{path}: no valid {what}: {detail}{more}")


def _unique(seen: dict[str, str], key: str, where: str, advice: str) -> str:
    """``key``, remembered as used at ``where``; a key used before is a :class:`_Skip`."""
    if key in seen:
        raise _Skip(f'duplicate id "{_clip(key)}" (first used at {seen[key]}); {advice}')
    seen[key] = where
    return key


def _id(entry: dict[str, Any], key: str, default: str | None = None) -> str:
    if key not in entry and default is not None:
        return default
    value = entry.get(key)
    if not _is_id(value):
        _fail(key, entry, "write a non-empty string or an integer id")
    return str(value)


def _beir_id(line: dict[str, Any]) -> str:
    return _id(line, "id" if "id" in line and "_id" not in line else "_id")


def _text(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if not (isinstance(value, str) and value.strip()):
        _fail(key, entry, "write a non-empty string")
    return value


def _decision(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value.strip().casefold() not in DECISIONS:
        raise _Skip(
            f'field "decision" must be one of {", ".join(DECISIONS)} (a yes/no question\'s gold decision)'
        )
    return value.strip().casefold()


def _answers(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        raise _Skip(
            f'field "{key}" is a string; write a list of strings: "{key}": {json.dumps([_clip(value)])}'
        )
    if not isinstance(value, list) or not all(isinstance(a, str) and a.strip() for a in value):
        raise _Skip(f'field "{key}" must be a list of non-empty strings, e.g. ["Paris", "Paris, France"]')
    return tuple(dict.fromkeys(value))


def _relevant(value: Any) -> dict[str, float]:
    if isinstance(value, list) and all(_is_id(v) for v in value):
        return {str(v): 1.0 for v in value}
    if isinstance(value, dict) and all(_is_id(k) and _is_grade(g) for k, g in value.items()):
        return {k: float(g) for k, g in value.items()}
    raise _Skip(
        'field "relevant" must be a list of document ids or sources, e.g. ["doc1", "doc7"], '
        'or an object of relevance grades, e.g. {"doc1": 2, "doc7": 1}'
    )


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Skip(f"the {what} is a JSON {_json_type(value)}; write an object")
    return value


def _list(entry: dict[str, Any], key: str) -> list[Any]:
    value = entry.get(key)
    if not isinstance(value, list):
        _fail(key, entry, "write a list")
    return value


def _fail(key: str, entry: dict[str, Any], advice: str) -> NoReturn:
    raise _Skip(f'field "{key}" is {_kind(entry, key)}; {advice}')


def _unknown_field(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    return f'unknown field "{_clip(key)}"{hint}; the known fields are: {", ".join(known)}'


def _clip(text: str, limit: int = 60) -> str:
    """``text`` for a message: its first ``limit`` characters and "..." when it is longer
    (a huge value in a file is not echoed back)."""
    return text if len(text) <= limit else f"{text[:limit]}..."


def _kind(entry: dict[str, Any], key: str) -> str:
    """How a field looks, for a message: "missing", "empty", "a number", ..."""
    if key not in entry:
        return "missing"
    value = entry[key]
    if isinstance(value, str) and not value.strip():
        return "empty"
    return f"a JSON {_json_type(value)}"


def _json_type(value: Any) -> str:
    kinds = ((bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array"), (dict, "object"))
    found = next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)
    return "null" if value is None else found


def _is_id(value: Any) -> bool:
    return (isinstance(value, str) and bool(value.strip())) or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def _is_grade(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

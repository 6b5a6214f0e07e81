"""Loading evaluation questions: JSONL, BEIR folders, SQuAD JSON; bad lines become
InputProblems naming the place and the fix, unreadable files raise ConfigurationError."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.data import (
    CorpusDoc,
    EvalData,
    EvalQuestion,
    InputProblem,
    load_beir,
    load_corpus,
    load_jsonl,
    load_questions,
    load_squad,
)

DATA = Path("/work/shared/data")
#: 50,000 nested arrays: past the interpreter's recursion limit for ``json.loads``
DEEP = "[" * 50_000 + "]" * 50_000
TOO_DEEP = "not valid JSON (nested deeper than the interpreter's recursion limit)"


def write_lines(path: Path, *lines: Any) -> Path:
    """One line per item: strings as they are, anything else as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


# -- JSONL ---------------------------------------------------------------------------


def test_jsonl_reads_every_field_and_skips_blank_lines(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "questions.jsonl",
        {"id": "capital", "question": "Capital of France?", "answers": ["Paris", "Paris"]},
        "",
        "   ",
        {"question": "Who wrote Hamlet?", "relevant": ["doc1", 7]},
        {"id": 42, "question": "Largest planet?", "answers": [], "relevant": {"a": 2, "b": 0.5, "c": 0}},
    )
    data = load_jsonl(path)

    assert data.name == "questions"
    assert data.corpus is None
    assert data.problems == []
    assert data.questions == [
        EvalQuestion("capital", "Capital of France?", ("Paris",)),
        # the default id is the 1-based line number, blank lines counted
        EvalQuestion("q4", "Who wrote Hamlet?", (), {"doc1": 1.0, "7": 1.0}),
        EvalQuestion("42", "Largest planet?", (), {"a": 2.0, "b": 0.5, "c": 0.0}),
    ]
    assert data.has_answers() and data.has_relevance()


def test_jsonl_without_answers_or_relevance(tmp_path: Path) -> None:
    data = load_jsonl(write_lines(tmp_path / "q.jsonl", {"question": "Why?"}, {"question": "How?"}))
    assert [q.id for q in data.questions] == ["q1", "q2"]
    assert not data.has_answers()
    assert not data.has_relevance()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", ["not valid JSON", "one JSON object per line"]),
        ('["a list"]', ["a JSON array, not an object"]),
        ({"answers": ["x"]}, ['field "question" is missing', "non-empty string"]),
        ({"question": "  "}, ['field "question" is empty']),
        ({"question": 3}, ['field "question" is a JSON number']),
        ({"question": "Q?", "answers": "Paris"}, ['field "answers" is a string', '"answers": ["Paris"]']),
        (
            {"question": "Q?", "answers": ["Paris", 1]},
            ['field "answers" must be a list of non-empty strings'],
        ),
        (
            {"question": "Q?", "answers": ["Paris", ""]},
            ['field "answers" must be a list of non-empty strings'],
        ),
        ({"question": "Q?", "relevant": "doc1"}, ['field "relevant" must be a list of document ids']),
        ({"question": "Q?", "relevant": {"doc1": "high"}}, ['field "relevant"', '{"doc1": 2, "doc7": 1}']),
        ({"question": "Q?", "relevant": [True]}, ['field "relevant"']),
        ({"question": "Q?", "id": True}, ['field "id" is a JSON boolean', "string or an integer id"]),
        ({"question": "Q?", "id": 1.5}, ['field "id" is a JSON number']),
        ({"question": "Q?", "id": None}, ['field "id" is a JSON null']),
        (
            {"question": "Q?", "answer": ["Paris"]},
            [
                'unknown field "answer"',
                'did you mean "answers"?',
                "known fields are: id, question, answers, relevant",
            ],
        ),
        ({"question": "Q?", "gold": ["Paris"]}, ['unknown field "gold"; the known fields are: id, question']),
        pytest.param(DEEP, [TOO_DEEP, "write one JSON object per line"], id="nested-arrays"),
        pytest.param(
            '{"question": "Q?", "id": ' + '{"a": ' * 50_000 + "1" + "}" * 50_001,
            [TOO_DEEP],
            id="nested-objects",
        ),
        pytest.param(
            '{"question": "Q?", "id": ' + "7" * 5_000 + "}",
            ["not valid JSON (an integer longer than 4300 digits)", "one JSON object per line"],
            id="huge-integer",
        ),
    ],
)
def test_jsonl_skips_a_bad_line_and_says_why(tmp_path: Path, line: Any, expected: list[str]) -> None:
    path = write_lines(tmp_path / "qs.jsonl", {"question": "Good one?"}, line, {"question": "Good too?"})
    data = load_jsonl(path)

    assert [q.question for q in data.questions] == ["Good one?", "Good too?"]
    assert [p.where for p in data.problems] == ["qs.jsonl:2"]
    for fragment in expected:
        assert fragment in data.problems[0].message
    assert str(data.problems[0]) == f"qs.jsonl:2: {data.problems[0].message}"


def test_jsonl_duplicate_id_keeps_the_first(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "qs.jsonl",
        {"id": "a", "question": "First?"},
        {"id": "b", "question": "Second?"},
        {"id": "a", "question": "Again?"},
        {"question": "Default id collides?"},  # line 4: "q4"
        {"id": "q4", "question": "Explicit q4?"},
    )
    data = load_jsonl(path)

    assert [(q.id, q.question) for q in data.questions] == [
        ("a", "First?"),
        ("b", "Second?"),
        ("q4", "Default id collides?"),
    ]
    assert [p.where for p in data.problems] == ["qs.jsonl:3", "qs.jsonl:5"]
    assert 'duplicate id "a" (first used at line 1)' in data.problems[0].message
    assert "give each question its own id" in data.problems[0].message


def test_jsonl_a_line_skipped_for_another_reason_does_not_claim_its_id(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "qs.jsonl", {"id": "a", "question": ""}, {"id": "a", "question": "Fine?"})
    data = load_jsonl(path)
    assert [q.id for q in data.questions] == ["a"]
    assert [p.where for p in data.problems] == ["qs.jsonl:1"]


def test_jsonl_line_separator_inside_a_string_is_not_a_line_break(tmp_path: Path) -> None:
    path = tmp_path / "qs.jsonl"
    # json.dumps(ensure_ascii=False) leaves U+2028 as it is; str.splitlines would split there
    path.write_text(json.dumps({"question": "one\u2028two"}, ensure_ascii=False) + "\n", encoding="utf-8")
    data = load_jsonl(path)
    assert [q.question for q in data.questions] == ["one\u2028two"]
    assert data.problems == []


def test_jsonl_windows_line_endings_and_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "qs.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"question": "A?"}\r\n{"question": "B?"}\r\n')
    data = load_jsonl(path)
    assert [q.question for q in data.questions] == ["A?", "B?"]
    assert data.problems == []


def test_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"nope\.jsonl: no such file"):
        load_jsonl(tmp_path / "nope.jsonl")


def test_jsonl_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes('{"question": "Où est la gare ?"}\n'.encode("latin-1"))
    with pytest.raises(ConfigurationError, match=r"latin\.jsonl: not UTF-8 .*save the file as UTF-8"):
        load_jsonl(path)


def test_jsonl_a_line_not_utf8_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        b'{"question": "A?"}\n'
        + '{"question": "Où ?"}\n'.encode("latin-1")
        + '{"question": "Où ?"}\n'.encode()
    )
    data = load_jsonl(path)
    assert [q.question for q in data.questions] == ["A?", "Où ?"]
    assert [str(p) for p in data.problems] == [
        "mixed.jsonl:2: not UTF-8 text (byte 15 cannot be decoded); save the file as UTF-8"
    ]


def deny_reading(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``path`` unreadable: mode 000, and for root (who reads it anyway) reading it
    raises what the system says to anyone else."""
    path.chmod(0)
    if os.geteuid() == 0:
        read_bytes = Path.read_bytes

        def denied(self: Path) -> bytes:
            if self == path:
                raise PermissionError(13, "Permission denied", str(path))
            return read_bytes(self)

        monkeypatch.setattr(Path, "read_bytes", denied)


def test_jsonl_a_directory_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "qs.jsonl").mkdir()
    with pytest.raises(ConfigurationError, match=r"qs\.jsonl: a directory, not a file; give the path"):
        load_jsonl(tmp_path / "qs.jsonl")


def test_jsonl_an_unreadable_file_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_lines(tmp_path / "secret.jsonl", {"question": "A?"})
    deny_reading(path, monkeypatch)
    with pytest.raises(
        ConfigurationError,
        match=r"secret\.jsonl: cannot be read \(Permission denied\); check the path and its permissions",
    ):
        load_jsonl(path)


def test_jsonl_with_no_valid_question_names_the_first_problems(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "bad.jsonl", *[{"answer": "x"}] * 4, "[]")
    with pytest.raises(ConfigurationError) as caught:
        load_jsonl(path)
    message = str(caught.value)
    assert message.startswith(f'{path}: no valid questions: bad.jsonl:1: unknown field "answer"')
    assert "bad.jsonl:3" in message and "bad.jsonl:4" not in message
    assert "(and 2 more problems)" in message


def test_jsonl_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"empty\.jsonl: no valid questions: it holds none"):
        load_jsonl(path)


# -- sampling ------------------------------------------------------------------------


def make_data(count: int) -> EvalData:
    questions = [EvalQuestion(f"q{i}", f"Question {i}?") for i in range(count)]
    return EvalData("set", questions, [CorpusDoc("d", "text")], [InputProblem("f:1", "bad")])


def test_sample_without_limit_or_with_a_large_one_keeps_everything_in_order() -> None:
    data = make_data(5)
    for limit in (None, 5, 50):
        sampled = data.sample(limit)
        assert sampled.questions == data.questions
        assert sampled.questions is not data.questions


def test_sample_is_seeded_and_keeps_file_order() -> None:
    data = make_data(30)
    first = data.sample(8, seed=3)

    ids = [q.id for q in first.questions]
    assert len(set(ids)) == 8
    assert ids == sorted(ids, key=lambda i: int(i[1:]))  # file order
    assert data.sample(8, seed=3).questions == first.questions  # deterministic
    assert data.sample(8, seed=4).questions != first.questions
    assert (first.name, first.corpus, first.problems) == (data.name, data.corpus, data.problems)
    assert len(data.questions) == 30  # the original is left alone


def test_sample_rejects_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="limit must be at least 1"):
        make_data(3).sample(0)


# -- BEIR ----------------------------------------------------------------------------


def write_beir(folder: Path, *, qrels: dict[str, list[str]] | None) -> Path:
    write_lines(
        folder / "corpus.jsonl",
        {"_id": "d1", "title": "Paris", "text": "Paris is the capital of France."},
        {"title": "No id", "text": "Lost."},
        {"id": "d2", "text": "Berlin is the capital of Germany."},
        {"_id": "d3", "title": "Rome", "text": "Rome is in Italy."},
    )
    write_lines(
        folder / "queries.jsonl",
        {"_id": "q1", "text": "Capital of France?", "metadata": {"answers": ["Paris"]}},
        {"_id": "q2", "text": "Capital of Germany?", "metadata": {}},
        {"_id": "q3", "text": ""},
        {"_id": "q4", "text": "Where is Rome?"},
        {"_id": "q5", "text": "Unjudged?", "metadata": {"answers": "Rome"}},
    )
    for split, lines in (qrels or {}).items():
        write_lines(folder / "qrels" / f"{split}.tsv", "query-id\tcorpus-id\tscore", *lines)
    return folder


def test_beir_questions_are_the_judged_queries(tmp_path: Path) -> None:
    folder = write_beir(
        tmp_path / "tiny",
        qrels={
            "test": [
                "q4\td3\t2",
                "q1\td1\t1",
                "q1\td2\t0",  # judged not relevant: left out
                "q2\td2",  # two columns
                "q2\td2\tvery",  # not a number
                "ghost\td1\t1",  # unknown query: ignored
            ],
            "train": ["q2\td2\t1"],
        },
    )
    data = load_beir(folder)

    assert data.name == "tiny"
    # in queries.jsonl order, not qrels order; q2's qrels lines were both bad, so q2 is unjudged
    assert data.questions == [
        EvalQuestion("q1", "Capital of France?", ("Paris",), {"d1": 1.0}),
        EvalQuestion("q4", "Where is Rome?", (), {"d3": 2.0}),
    ]
    assert data.corpus == [
        CorpusDoc("d1", "Paris is the capital of France.", "Paris"),
        CorpusDoc("d2", "Berlin is the capital of Germany."),
        CorpusDoc("d3", "Rome is in Italy.", "Rome"),
    ]
    assert [p.where for p in data.problems] == [
        "corpus.jsonl:2",
        "queries.jsonl:3",
        "queries.jsonl:5",
        "qrels/test.tsv:5",
        "qrels/test.tsv:6",
    ]
    messages = [p.message for p in data.problems]
    assert messages[0].startswith('field "_id" is missing')
    assert messages[1].startswith('field "text" is empty')
    assert messages[2].startswith('field "metadata.answers" is a string')
    assert messages[3].startswith("2 tab-separated column(s); write three")
    assert messages[4].startswith('score "very" is not a number')

    train = load_beir(folder, split="train")
    assert train.questions == [EvalQuestion("q2", "Capital of Germany?", (), {"d2": 1.0})]


def test_beir_query_with_only_non_relevant_judgements_is_kept_without_relevance(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny", qrels={"test": ["q1\td1\t1", "q2\td2\t0"]})
    data = load_beir(folder)
    assert [(q.id, dict(q.relevant)) for q in data.questions] == [("q1", {"d1": 1.0}), ("q2", {})]


def test_beir_without_qrels_gives_every_query_without_relevance(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "tiny", qrels=None))
    assert [q.id for q in data.questions] == ["q1", "q2", "q4"]
    assert not data.has_relevance()
    assert data.has_answers()


def test_beir_unknown_split_lists_the_known_ones(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny", qrels={"test": ["q1\td1\t1"], "train": ["q2\td2\t1"]})
    with pytest.raises(
        ConfigurationError, match=r"dev\.tsv: no such file; the splits in .* are: test, train"
    ):
        load_beir(folder, split="dev")


def test_beir_bad_lines_of_every_file_are_named(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny", qrels={"test": ["q1\td1\t1", "q4\td3\t1"]})
    with (folder / "corpus.jsonl").open("a", encoding="utf-8") as f:
        f.write(DEEP + "\n")  # line 5
    with (folder / "queries.jsonl").open("a", encoding="utf-8") as f:
        f.write(DEEP + "\n")  # line 6
    with (folder / "qrels" / "test.tsv").open("ab") as f:
        f.write("q4\td\xe9j\xe0\t1\n".encode("latin-1"))  # line 4
    data = load_beir(folder)
    assert [q.id for q in data.questions] == ["q1", "q4"]
    assert [(p.where, p.message.split(";")[0]) for p in data.problems] == [
        ("corpus.jsonl:2", 'field "_id" is missing'),
        ("corpus.jsonl:5", TOO_DEEP),
        ("queries.jsonl:3", 'field "text" is empty'),
        ("queries.jsonl:5", 'field "metadata.answers" is a string'),
        ("queries.jsonl:6", TOO_DEEP),
        ("qrels/test.tsv:4", "not UTF-8 text (byte 4 cannot be decoded)"),
    ]


def test_load_corpus_whose_every_line_is_not_utf8_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes('{"_id": "d1", "text": "Où ?"}\n\n{"_id": "d2", "text": "Là"}\n'.encode("latin-1"))
    with pytest.raises(
        ConfigurationError, match=r"corpus\.jsonl: not UTF-8 text \(byte 24 .*save the file as UTF-8"
    ):
        load_corpus(path)


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl"])
def test_beir_missing_file(tmp_path: Path, missing: str) -> None:
    folder = write_beir(tmp_path / "tiny", qrels=None)
    (folder / missing).unlink()
    with pytest.raises(ConfigurationError, match=rf"{missing}: no such file; a BEIR folder holds"):
        load_beir(folder)


def test_load_corpus_alone_logs_the_skipped_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        {"_id": 1, "text": "One.", "title": None},
        {"_id": "2", "text": 2},
        {"_id": "1", "text": "Duplicate."},
    )
    with caplog.at_level(logging.WARNING, logger="selfrag"):
        docs = load_corpus(path)
    assert docs == [CorpusDoc("1", "One.")]
    assert 'skipped 2 bad line(s); the first: corpus.jsonl:2: field "text" is a JSON number' in caplog.text

    problems: list[InputProblem] = []
    assert load_corpus(path, problems=problems) == docs
    assert [p.where for p in problems] == ["corpus.jsonl:2", "corpus.jsonl:3"]
    assert 'duplicate id "1" (first used at line 1); give each document its own id' in problems[1].message


def test_load_corpus_with_no_valid_document(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no valid documents: corpus\.jsonl:1"):
        load_corpus(write_lines(tmp_path / "corpus.jsonl", {"title": "no id, no text"}))


def test_real_scifact() -> None:
    folder = DATA / "scifact"
    if not folder.is_dir():
        pytest.skip(f"{folder} is not here")
    data = load_questions(folder)
    assert (data.name, len(data.questions), len(data.corpus or [])) == ("scifact", 300, 5183)
    assert data.problems == []
    assert not data.has_answers()
    assert sum(len(q.relevant) for q in data.questions) == 339  # the README's judgement count
    assert data.questions[0] == EvalQuestion(
        "1", "0-dimensional biomaterials show inductive properties.", (), {"31715818": 1.0}
    )


def test_real_hotpotqa_beir() -> None:
    folder = DATA / "hotpotqa_500" / "beir"
    if not folder.is_dir():
        pytest.skip(f"{folder} is not here")
    data = load_questions(folder)
    assert (len(data.questions), len(data.corpus or [])) == (500, 4858)
    assert data.problems == []
    assert all(q.answers for q in data.questions)
    assert all(len(q.relevant) == 2 for q in data.questions)
    assert data.questions[0].answers == ("Chief of Protocol",)


# -- SQuAD ---------------------------------------------------------------------------


def squad_qa(qid: str, question: str, *answers: str) -> dict[str, Any]:
    return {"id": qid, "question": question, "answers": [{"text": a, "answer_start": 0} for a in answers]}


def test_squad_paragraphs_become_documents_and_bad_entries_problems(tmp_path: Path) -> None:
    top = {
        "version": "1.1",
        "data": [
            {
                "title": "Denver",
                "paragraphs": [
                    {
                        "context": "The Denver Broncos won Super Bowl 50.",
                        "qas": [
                            squad_qa(
                                "a", "Who won?", "Denver Broncos", "The Denver Broncos", "Denver Broncos"
                            ),
                            {"id": "b", "answers": []},  # no question
                            {"id": "c", "question": "What?", "answers": "Denver"},
                            squad_qa("a", "Duplicate id?", "x"),
                        ],
                    },
                    {"qas": [squad_qa("lost", "Lost?", "x")]},  # no context: skipped with its questions
                    {"context": "Super Bowl 50 was in 2016.", "qas": [squad_qa("d", "When?", "2016")]},
                ],
            },
            {"title": "No paragraphs"},
            "not an article",
            {"title": "Rome", "paragraphs": [{"context": "Rome is old.", "qas": [squad_qa("e", "Old?")]}]},
        ],
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(top), encoding="utf-8")
    data = load_squad(path)

    assert data.name == "tiny"
    assert data.corpus == [
        CorpusDoc("Denver#0", "The Denver Broncos won Super Bowl 50.", "Denver"),
        CorpusDoc("Denver#2", "Super Bowl 50 was in 2016.", "Denver"),
        CorpusDoc("Rome#0", "Rome is old.", "Rome"),
    ]
    assert data.questions == [
        EvalQuestion("a", "Who won?", ("Denver Broncos", "The Denver Broncos"), {"Denver#0": 1.0}),
        EvalQuestion("d", "When?", ("2016",), {"Denver#2": 1.0}),
        EvalQuestion("e", "Old?", (), {"Rome#0": 1.0}),
    ]
    assert [str(p) for p in data.problems] == [
        'tiny.json: data[0].paragraphs[0].qas[1]: field "question" is missing; write a non-empty string',
        'tiny.json: data[0].paragraphs[0].qas[2]: field "answers" must be a list of objects with a non-empty '
        '"text", e.g. [{"text": "Denver Broncos", "answer_start": 177}]',
        'tiny.json: data[0].paragraphs[0].qas[3]: duplicate id "a" '
        "(first used at data[0].paragraphs[0].qas[0]); give each question its own id",
        'tiny.json: data[0].paragraphs[1]: field "context" is missing; write a non-empty string',
        'tiny.json: data[1]: field "paragraphs" is missing; write a list',
        "tiny.json: data[2]: the article is a JSON string; write an object",
    ]


def test_squad_duplicate_title_is_a_problem(tmp_path: Path) -> None:
    article = {"title": "Same", "paragraphs": [{"context": "Text.", "qas": [squad_qa("x", "Q?", "A")]}]}
    second = {"title": "Same", "paragraphs": [{"context": "Other.", "qas": [squad_qa("y", "Q2?", "B")]}]}
    path = tmp_path / "dup.json"
    path.write_text(json.dumps({"data": [article, second]}), encoding="utf-8")
    data = load_squad(path)
    assert [q.id for q in data.questions] == ["x"]
    assert [p.where for p in data.problems] == ["dup.json: data[1].paragraphs[0]"]
    assert "give each article its own title" in data.problems[0].message


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{broken", r"not valid JSON"),
        ('{"version": "1.1"}', r'not SQuAD JSON; expected an object with a "data" list'),
        ('{"data": []}', r"no valid questions"),
        pytest.param(DEEP, rf"s\.json: {re.escape(TOO_DEEP)}; write SQuAD v1.1 JSON", id="nested"),
    ],
)
def test_squad_unusable_file(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError, match=match):
        load_squad(path)


def test_real_xquad() -> None:
    path = DATA / "xquad_en" / "xquad.en.json"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    data = load_questions(path)
    assert (len(data.questions), len(data.corpus or [])) == (1190, 240)
    assert data.problems == []
    assert data.questions[0] == EvalQuestion(
        "56beb4343aeaaa14008c925b",
        "How many points did the Panthers defense surrender?",
        ("308",),
        {"Super_Bowl_50#0": 1.0},
    )
    assert all(q.answers for q in data.questions)


# -- load_questions picks the format -------------------------------------------------


def test_load_questions_detects_the_format(tmp_path: Path) -> None:
    beir = write_beir(tmp_path / "beir_set", qrels={"test": ["q1\td1\t1"]})
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps({"data": [{"title": "T", "paragraphs": [
        {"context": "C.", "qas": [squad_qa("s1", "Q?", "A")]}]}]}), encoding="utf-8")  # fmt: skip
    one_line_json = write_lines(tmp_path / "single.json", {"question": "Just one?"})
    jsonl_named_json = write_lines(tmp_path / "lines.json", {"question": "A?"}, {"question": "B?"})
    other_suffix = write_lines(tmp_path / "qs.txt", {"question": "Txt?"})

    assert [q.id for q in load_questions(beir).questions] == ["q1"]
    assert load_questions(squad).corpus == [CorpusDoc("T#0", "C.", "T")]
    assert [q.question for q in load_questions(one_line_json).questions] == ["Just one?"]
    assert [q.question for q in load_questions(jsonl_named_json).questions] == ["A?", "B?"]
    assert [q.question for q in load_questions(other_suffix).questions] == ["Txt?"]
    with pytest.raises(ConfigurationError, match="no such file"):
        load_questions(tmp_path / "missing.json")


def test_load_questions_reads_a_json_file_too_deep_to_parse_as_jsonl(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP, encoding="utf-8")
    with pytest.raises(
        ConfigurationError, match=rf"deep\.json: no valid questions: deep\.json:1: {re.escape(TOO_DEEP)}"
    ):
        load_questions(deep)
    lines = write_lines(tmp_path / "lines.json", {"question": "A?"}, DEEP, {"question": "B?"})
    data = load_questions(lines)
    assert [q.question for q in data.questions] == ["A?", "B?"]
    assert [p.where for p in data.problems] == ["lines.json:2"] and TOO_DEEP in data.problems[0].message

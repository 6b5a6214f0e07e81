"""``--llm-max-tokens`` and ``--llm-temperature``: every command that takes ``--llm`` passes
them to the LLM factory, which hands them to the local models, ``openai:MODEL`` and the
providers; values out of range get one ``selfrag: error:`` line."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import cli
from selfrag_core.cli.commands import _llm
from selfrag_core.cli.parser import build_parser
from selfrag_core.errors import ConfigurationError
from selfrag_core.local import factory

OPTIONS = ["--llm-max-tokens", "64", "--llm-temperature", "0.7"]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The factory's calls (spec, options); the real factory still builds the LLM."""
    seen: list[tuple[str, dict[str, Any]]] = []
    real = factory.make_llm

    def spy(spec: str = "local", **options: Any) -> Any:
        seen.append((spec, options))
        return real(spec, **options)

    monkeypatch.setattr(factory, "make_llm", spy)
    return seen


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["ask", "q"],
        ["demo"],
        ["eval", "questions.jsonl"],
        ["serve"],
    ],
)
def test_every_llm_command_passes_the_options_to_the_factory(calls, argv) -> None:  # type: ignore[no-untyped-def]
    args = build_parser().parse_args([*argv, "--llm", "fake", *OPTIONS])
    _llm(args)
    assert calls == [("fake", {"max_tokens": 64, "temperature": 0.7})]


def test_options_not_given_are_not_passed(calls) -> None:  # type: ignore[no-untyped-def]
    _llm(build_parser().parse_args(["ask", "q", "--llm", "fake", "--threads", "3"]))
    _llm(build_parser().parse_args(["ask", "q", "--llm", "fake", "--llm-temperature", "0"]))
    assert calls == [("fake", {"n_threads": 3}), ("fake", {"temperature": 0.0})]


def test_ask_end_to_end_reaches_the_factory(capsys, calls, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "bees.md").write_text("Honeybees dance to show where flowers are.\n", encoding="utf-8")
    index = str(tmp_path / "index")
    assert run(capsys, "index", str(tmp_path / "bees.md"), "--index", index, "--embedder", "hashing")[0] == 0
    code, out, _ = run(capsys, "ask", "How do bees communicate?", "--index", index, "--llm", "fake", *OPTIONS)
    assert code == 0 and "Honeybees dance" in out
    assert calls == [("fake", {"max_tokens": 64, "temperature": 0.7})]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--llm-max-tokens", "0"], "--llm-max-tokens must be a whole number >= 1, got 0"),
        (["--llm-max-tokens", "-5"], "--llm-max-tokens must be a whole number >= 1, got -5"),
        (
            ["--llm-temperature", "-0.1"],
            "--llm-temperature must be a number >= 0 (0: deterministic), got -0.1",
        ),
        (["--llm-temperature", "nan"], "--llm-temperature must be a number >= 0"),
        (["--llm-temperature", "inf"], "--llm-temperature must be a number >= 0"),
    ],
)
def test_bad_values_are_one_error_line_before_any_work(capsys, calls, tmp_path, flags, message) -> None:  # type: ignore[no-untyped-def]
    missing = str(tmp_path / "no-index")  # checked before the index is opened
    code, out, err = run(capsys, "ask", "q", "--index", missing, "--llm", "fake", *flags)
    assert code == 2 and out == ""
    assert err.startswith(f"selfrag: error: {message}") and err.count("\n") == 1
    assert calls == [] and not Path(missing).exists()


def test_values_that_are_not_numbers_are_refused_by_the_parser(capsys) -> None:  # type: ignore[no-untyped-def]
    for flags in (["--llm-max-tokens", "many"], ["--llm-max-tokens", "1.5"], ["--llm-temperature", "hot"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(["ask", "q", "--llm", "fake", *flags])
        assert exc.value.code == 2
        assert f"argument {flags[0]}: invalid" in capsys.readouterr().err


def test_the_local_models_get_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from selfrag_core.local import llm as local_llm

    made: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(local_llm, "LocalLLM", lambda name, **options: made.append((name, options)))
    _llm(build_parser().parse_args(["ask", "q", "--llm", "local", "--threads", "2", *OPTIONS]))
    assert made == [("local", {"n_threads": 2, "max_tokens": 64, "temperature": 0.7})]


def test_openai_gets_them_and_the_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai", reason="pip install 'selfrag[openai]'")
    monkeypatch.setenv("SELFRAG_LLM_BASE_URL", "http://from-env:1/v1")
    argv = ["ask", "q", "--llm", "openai:m", "--llm-base-url", "http://from-flag:2/v1", *OPTIONS]
    llm = _llm(build_parser().parse_args(argv))
    assert llm.max_tokens == 64 and llm.temperature == 0.7
    assert "from-flag" in str(llm.base_url) and "from-env" not in str(llm.base_url)
    llm = _llm(build_parser().parse_args(["ask", "q", "--llm", "openai:m"]))
    assert "from-env" in str(llm.base_url) and llm.max_tokens == 512  # defaults without the flags


def test_a_provider_gets_them_as_keywords(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setitem(factory.PROVIDERS, "echo", lambda model, **kw: made.append((model, kw)) or "llm")
    assert _llm(build_parser().parse_args(["ask", "q", "--llm", "echo:tiny", *OPTIONS])) == "llm"
    assert _llm(build_parser().parse_args(["ask", "q", "--llm", "echo:tiny", "--threads", "2"]))
    assert made == [("tiny", {"max_tokens": 64, "temperature": 0.7}), ("tiny", {})]


def test_a_provider_without_the_options_is_a_clear_error(capsys, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(factory.PROVIDERS, "plain", lambda model: "llm")
    assert factory.make_llm("plain:m") == "llm"
    with pytest.raises(ConfigurationError, match="the LLM provider 'plain' takes no temperature option"):
        factory.make_llm("plain:m", temperature=0.5)
    (tmp_path / "a.txt").write_text("Some text to index.\n", encoding="utf-8")
    index = str(tmp_path / "index")
    assert run(capsys, "index", str(tmp_path / "a.txt"), "--index", index, "--embedder", "hashing")[0] == 0
    code, _, err = run(capsys, "ask", "q", "--index", index, "--llm", "plain:m", "--llm-max-tokens", "9")
    assert code == 2 and "selfrag: error: the LLM provider 'plain' takes no max_tokens option" in err


def test_entry_point_resolvers_get_them(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def any_provider(spec: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        seen.append((spec, {"max_tokens": max_tokens, "temperature": temperature}))
        return "llm"

    ep = metadata.EntryPoint(factory.ANY_PROVIDER, "somewhere:resolver", factory.PROVIDER_GROUP)
    monkeypatch.setattr(factory, "provider_entry_points", lambda: [ep])
    monkeypatch.setattr(factory, "_load", lambda ep: any_provider)
    assert factory.make_llm("vendor:model", max_tokens=10, temperature=0.2, n_threads=2) == "llm"
    assert factory.make_llm("vendor:model") == "llm"
    assert seen == [
        ("vendor:model", {"max_tokens": 10, "temperature": 0.2}),
        ("vendor:model", {"max_tokens": None, "temperature": None}),
    ]


def test_the_fake_llm_answers_a_question_about_json_in_text() -> None:
    """A document or question that mentions JSON does not turn an answer step into a JSON
    step (the fake used to reply with its JSON object whenever the prompt said JSON)."""
    from selfrag_core import PlainRAG
    from selfrag_core.local.factory import make_llm
    from selfrag_core.testing import FakeRetriever

    docs = ["JSON support landed in version 2. It reads and writes JSON files."]
    answer = PlainRAG(FakeRetriever(docs), make_llm("fake")).query("When did JSON support land?").answer
    assert answer.startswith("JSON support landed in version 2") and "{" not in answer

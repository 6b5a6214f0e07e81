"""`selfrag ask` against models that hang, fail or are misconfigured: it exits within
its timeouts, non-zero, with one `selfrag: error:` line (issue 16, classes 1 and 7)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import cli
from selfrag_core.local import factory

STRATEGIES = ["self", "hyde", "recursive", "healing"]


@pytest.fixture
def index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "paris.md").write_text("Paris is the capital of France. The Seine flows through it.\n")
    target = tmp_path / "index"
    assert cli.main(["index", str(docs), "--index", str(target), "--embedder", "none", "--plain"]) == 0
    capsys.readouterr()
    return target


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def provide(monkeypatch: pytest.MonkeyPatch, name: str, make: Any) -> None:
    monkeypatch.setitem(factory.PROVIDERS, name, make)


def ask(capsys: pytest.CaptureFixture[str], index: Path, *extra: str) -> tuple[int, str, str, float]:
    start = time.perf_counter()
    code = cli.main(["ask", "What is the capital of France?", "--index", str(index), *extra])
    out, err = capsys.readouterr()
    return code, out, err, time.perf_counter() - start


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("selfrag: error:")]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_model_that_never_answers_exits_within_its_timeouts(
    capsys: pytest.CaptureFixture[str],
    index: Path,
    monkeypatch: pytest.MonkeyPatch,
    release: threading.Event,
    strategy: str,
) -> None:
    class Hangs:
        def generate(self, prompt: str) -> str:
            release.wait(60)
            return "late"

    provide(monkeypatch, "hangs", lambda model: Hangs())
    code, out, err, took = ask(
        capsys, index, "--llm", "hangs:x", "--strategy", strategy, "--llm-timeout", "0.2", "--timeout", "1"
    )
    assert took < 5
    assert code == 1 and out == ""
    assert len(error_lines(err)) == 1 and "no answer could be generated" in err
    assert "Timeout" in err


def test_the_process_exits_after_abandoning_a_hung_call(index: Path, tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, threading
            from selfrag_core import cli
            from selfrag_core.local import factory

            class Hangs:
                def generate(self, prompt):
                    threading.Event().wait()

            factory.PROVIDERS["hangs"] = lambda model: Hangs()
            sys.exit(cli.main(sys.argv[1:]))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script), "ask", "Where is Paris?", "--index", str(index), "--llm", "hangs:x",
         "--llm-timeout", "0.2", "--timeout", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert len(error_lines(done.stderr)) == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_unreachable_model_exits_non_zero(
    capsys: pytest.CaptureFixture[str], index: Path, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    class Unreachable:
        def generate(self, prompt: str) -> str:
            raise ConnectionRefusedError("connection refused")

    provide(monkeypatch, "down", lambda model: Unreachable())
    code, out, err, _ = ask(
        capsys, index, "--llm", "down:x", "--strategy", strategy, "--llm-timeout", "1", "--timeout", "3"
    )
    # the answer prompts failed after their retries (the back-off stops at --timeout)
    assert code == 1 and out == ""
    assert len(error_lines(err)) == 1 and "ConnectionRefusedError" in err


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_misconfigured_model_is_one_error_line(
    capsys: pytest.CaptureFixture[str], index: Path, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    class AuthenticationError(Exception):
        status_code = 401

    class Rejected:
        def generate(self, prompt: str) -> str:
            raise AuthenticationError("Incorrect API key provided")

    provide(monkeypatch, "rejected", lambda model: Rejected())
    code, out, err, _ = ask(capsys, index, "--llm", "rejected:x", "--strategy", strategy)
    assert code == 2 and out == ""
    assert len(error_lines(err)) == 1
    assert "LLM Rejected raised AuthenticationError" in err and "API key" in err


def test_a_provider_that_refuses_its_settings_is_one_error_line(
    capsys: pytest.CaptureFixture[str], index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class OpenAIError(Exception):
        pass

    def no_key(model: str) -> Any:
        raise OpenAIError("The api_key client option must be set either by passing api_key to the client")

    provide(monkeypatch, "keyless", no_key)
    code, out, err, _ = ask(capsys, index, "--llm", "keyless:gpt")
    assert code == 2 and out == "" and "Traceback" not in err
    assert len(error_lines(err)) == 1 and "could not create the LLM 'keyless:gpt'" in err
    assert "set the API key" in err


def test_json_output_still_carries_the_trace_of_a_failed_answer(
    capsys: pytest.CaptureFixture[str], index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Unreachable:
        def generate(self, prompt: str) -> str:
            raise ConnectionResetError("reset by peer")

    provide(monkeypatch, "down", lambda model: Unreachable())
    code, out, err, _ = ask(capsys, index, "--llm", "down:x", "--json", "--timeout", "2")
    assert code == 1 and '"trace"' in out and "ConnectionResetError" in out
    assert len(error_lines(err)) == 1

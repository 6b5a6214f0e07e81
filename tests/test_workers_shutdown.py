"""No library thread runs or logs after interpreter shutdown: a call abandoned by its
timeout that wakes up while the program exits prints nothing (no fallback line, no
traceback) and starts no further work on the library's threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from selfrag_core import workers

#: a program whose structured LLM call is abandoned by a 0.1 s timeout; the call wakes up
#: at 0.4 s, while the program is exiting (a non-daemon thread keeps the exit going for a
#: second, as a client's connection pool or a tracer's flush does), fails on an executor
#: refusing work, logs a fallback as the adapters do and tries a further library call
PROGRAM = textwrap.dedent(
    """
    import concurrent.futures, logging, sys, threading, time
    from selfrag_core.llm import call_llm_detailed, run_coroutine_sync

    WAIT = sys.argv[1] == "wait"
    log = logging.getLogger("selfrag")

    class SlowStructuredLLM:
        def generate_structured(self, prompt, schema):
            time.sleep(0.4)
            try:
                concurrent.futures.ThreadPoolExecutor(1).submit(print).result()
            except RuntimeError as e:
                log.warning("selfrag fallback: structured output by json_mode failed (%s)", e)
            else:
                log.warning("selfrag fallback: structured output by json_mode failed (test)")

            async def plain():
                return "{}"

            return run_coroutine_sync(plain)  # more work on the library's threads

    try:
        call_llm_detailed(SlowStructuredLLM(), "p", 0, schema={"type": "object"}, timeout=0.1)
    except Exception as e:
        print("abandoned:", type(e).__name__, flush=True)
    if WAIT:
        time.sleep(1.0)  # the abandoned call ends while the program runs: it may log
    else:
        threading.Thread(target=time.sleep, args=(1.0,)).start()  # the exit lasts a second
    """
)


def run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=60, check=False
    )


def test_an_abandoned_call_is_silent_while_the_program_exits() -> None:
    exiting = run("exit")
    assert exiting.returncode == 0, exiting.stderr
    assert "abandoned: LLMTimeoutError" in exiting.stdout
    assert "selfrag fallback" not in exiting.stderr and "Traceback" not in exiting.stderr, exiting.stderr
    assert exiting.stderr == ""


def test_the_same_call_logs_while_the_program_runs() -> None:
    """The control: the program above logs its fallback when it has not begun to exit."""
    running = run("wait")
    assert "selfrag fallback: structured output by json_mode failed (test)" in running.stderr


def test_no_work_starts_once_the_interpreter_is_exiting(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = workers.Workers("test", max_threads=2)
    assert pool.submit(lambda: 1).result(timeout=5) == 1
    monkeypatch.setattr(workers, "shutting_down", lambda: True)
    with pytest.raises(RuntimeError, match="after interpreter shutdown"):
        pool.submit(lambda: 1)

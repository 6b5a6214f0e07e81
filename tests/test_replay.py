"""CachedLLM: record once, replay without the model; keys, tokens, errors, threads,
processes, corrupt files, and whole strategy runs recorded and replayed."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import (
    ConfigurationError,
    ExecutionConfig,
    LLMOutput,
    RAGSystemError,
    RecursiveRAG,
    RecursiveRAGConfig,
    SelfIRAG,
    SelfRAGConfig,
)
from selfrag_core.llm import acall_llm_detailed, call_llm_detailed
from selfrag_core.replay import CachedLLM, CacheLockedError, CacheMissError
from selfrag_core.testing import FakeLLM, FakeRetriever, FakeStructuredLLM, SyncOnlyFakeLLM, judge_json

SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "replies.sqlite"


def no_sleep(_: float) -> None:
    return None


class TokenLLM:
    """Reports token usage, like a provider's client."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompt: str) -> LLMOutput:
        self.calls += 1
        return LLMOutput(f"echo {prompt}", input_tokens=len(prompt), output_tokens=7)


# ---------------------------------------------------------------------- record and replay


def test_a_second_cache_on_the_file_answers_without_the_model(path: Path) -> None:
    first = FakeLLM("recorded answer")
    with CachedLLM(first, path) as cached:
        assert cached.generate("What is X?") == LLMOutput("recorded answer")
        assert cached.generate("What is X?").text == "recorded answer"  # same instance: a hit
        assert (cached.hits, cached.misses, first.n_calls, len(cached)) == (1, 1, 1, 1)

    fresh = FakeLLM("a different answer")
    with CachedLLM(fresh, path) as again:
        assert again.generate("What is X?").text == "recorded answer"
        assert fresh.n_calls == 0 and (again.hits, again.misses) == (1, 0)
        assert again.generate("What is Y?").text == "a different answer"  # a miss records
        assert fresh.prompts == ["What is Y?"] and again.misses == 1 and len(again) == 2


def test_replay_miss_raises_without_calling_the_model(path: Path) -> None:
    inner = FakeLLM("never")
    prompt = "Explain the theory of everything in great detail, " * 4
    with CachedLLM(inner, path, replay=True) as cached:
        with pytest.raises(CacheMissError) as caught:
            cached.generate(prompt)
        assert inner.n_calls == 0 and (cached.hits, cached.misses) == (0, 0) and len(cached) == 0
    error = caught.value
    assert isinstance(error, ConfigurationError) and not error.retryable and error.component == "LLM"
    message = str(error)
    assert str(path) in message and cached.model_id in message and "without replay" in message
    assert prompt[:80] in message and prompt[:81] not in message
    assert (error.path, error.model_id, error.prompt, error.key) == (
        path,
        cached.model_id,
        prompt,
        cached.key(prompt),
    )


def test_replay_answers_what_was_recorded(path: Path) -> None:
    with CachedLLM(FakeLLM("yes"), path) as recorder:
        recorder.generate("q")
    inner = FakeLLM("no")
    with CachedLLM(inner, path, replay=True) as cached:
        assert cached.generate("q").text == "yes" and inner.n_calls == 0 and cached.hits == 1


def test_replay_needs_no_model_with_an_explicit_identity(path: Path) -> None:
    with CachedLLM(FakeLLM("recorded"), path, model_id="gpt-x", params={"temperature": 0}) as recorder:
        recorder.generate("q")
    with CachedLLM(None, path, model_id="gpt-x", params={"temperature": 0}, replay=True) as cached:
        assert cached.generate("q").text == "recorded"
        with pytest.raises(CacheMissError):
            cached.generate("other")
    with pytest.raises(ConfigurationError, match="replay=True"):
        CachedLLM(None, path, model_id="gpt-x")
    with pytest.raises(ConfigurationError, match="model_id"):
        CachedLLM(None, path, replay=True)


# ---------------------------------------------------------------------- namespaces


class Varying:
    """A model whose replies vary from call to call (llama-cpp's are not repeatable)."""

    def __init__(self) -> None:
        self.n_calls = 0

    def generate(self, prompt: str) -> str:
        self.n_calls += 1
        return f"reply {self.n_calls} to {prompt}"


def test_namespaces_keep_recordings_apart(path: Path) -> None:
    model = Varying()
    with CachedLLM(model, path, namespace="a") as a, CachedLLM(model, path, namespace="b") as b:
        assert a.key("p") != b.key("p") and a.key("p", namespace="b") == b.key("p")
        assert a.generate("p").text == "reply 1 to p" and b.generate("p").text == "reply 2 to p"
        assert a.generate("p").text == "reply 1 to p" and model.n_calls == 2


def test_fallback_namespaces_answer_in_order_and_record_under_the_namespace(path: Path) -> None:
    model = Varying()
    with CachedLLM(model, path, namespace="plain") as plain, CachedLLM(model, path, namespace="mine") as mine:
        plain.generate("both")  # reply 1
        mine.generate("both")  # reply 2
        mine.generate("only mine")  # reply 3
    with CachedLLM(model, path, namespace="shared", fallback_namespaces=("plain", "mine")) as shared:
        assert shared.generate("both").text == "reply 1 to both"  # the first fallback wins
        assert shared.generate("only mine").text == "reply 3 to only mine"
        assert shared.generate("new").text == "reply 4 to new"  # nowhere: the model
        assert (shared.hits, shared.borrowed, shared.misses, model.n_calls) == (2, 2, 1, 4)
        assert shared.generate("both").text == "reply 1 to both" and shared.borrowed == 2  # now its own
    # recorded under "shared": a cache on that namespace alone gets the same replies, in replay too
    with CachedLLM(None, path, model_id=shared.model_id, params={}, replay=True, namespace="shared") as alone:
        assert [alone.generate(p).text for p in ("both", "only mine", "new")] == [
            "reply 1 to both",
            "reply 3 to only mine",
            "reply 4 to new",
        ]


def test_the_first_reply_taken_from_a_fallback_is_the_one_every_later_caller_gets(path: Path) -> None:
    """Two contenders whose own recordings of a prompt differ: the first to ask shares its
    reply with the second (sharing holds even where the baseline never sent the prompt)."""
    model = Varying()
    with CachedLLM(model, path, namespace="x") as x, CachedLLM(model, path, namespace="y") as y:
        x.generate("p"), y.generate("p")  # reply 1, reply 2
    with (
        CachedLLM(model, path, namespace="s", fallback_namespaces=("plain", "x"), replay=True) as sx,
        CachedLLM(model, path, namespace="s", fallback_namespaces=("plain", "y"), replay=True) as sy,
    ):
        assert sx.generate("p").text == sy.generate("p").text == "reply 1 to p"
        assert (sx.borrowed, sy.borrowed, sy.hits, model.n_calls) == (1, 0, 1, 2)
        with pytest.raises(CacheMissError):  # replay: a prompt recorded nowhere is still a miss
            sx.generate("other")


def test_fallback_namespaces_must_be_a_list(path: Path) -> None:
    with pytest.raises(ConfigurationError, match="list of namespaces"):
        CachedLLM(FakeLLM(), path, namespace="s", fallback_namespaces="plain")
    with CachedLLM(FakeLLM(), path, namespace="s", fallback_namespaces=["s", "a", "a"]) as cached:
        assert cached.fallback_namespaces == ("a",)


# ---------------------------------------------------------------------- keys


def test_keys_cover_model_params_prompt_and_schema(path: Path) -> None:
    inner = FakeStructuredLLM(lambda prompt: f"reply to {prompt}")
    base = CachedLLM(inner, path, model_id="m", params={"temperature": 0.0, "stop": ["a"]})
    other_model = CachedLLM(inner, path, model_id="m2", params=base.params)
    other_params = CachedLLM(inner, path, model_id="m", params={"temperature": 0.7, "stop": ["a"]})
    keys = {
        base.key("p"),
        base.key("p2"),
        base.key("p", SCHEMA),
        base.key("p", {**SCHEMA, "required": ["items"]}),
        other_model.key("p"),
        other_params.key("p"),
    }
    assert len(keys) == 6 and all(len(k) == 64 and int(k, 16) >= 0 for k in keys)
    # canonical: the order of params, schema keys and tuples vs lists do not matter
    same = CachedLLM(inner, path, model_id="m", params={"stop": ("a",), "temperature": 0.0})
    assert same.key("p", dict(reversed(list(SCHEMA.items())))) == base.key("p", SCHEMA)

    for cached in (base, other_model, other_params):
        cached.generate("p")
    base.generate("p2")
    base.generate_structured("p", SCHEMA)
    assert len(base) == 5 and inner.n_calls == 5
    assert base.generate("p").text == "reply to p" and inner.n_calls == 5
    for cached in (base, other_model, other_params, same):
        cached.close()


def test_structured_calls_pass_the_schema_and_are_their_own_entries(path: Path) -> None:
    inner = FakeStructuredLLM('{"items": ["a"]}')
    with CachedLLM(inner, path) as cached:
        assert cached.generate_structured("p", SCHEMA).text == '{"items": ["a"]}'
        assert inner.calls[0].schema == SCHEMA
        cached.generate("p")  # no schema: another key
        assert inner.n_calls == 2 and inner.calls[1].schema is None
        cached.generate_structured("p", SCHEMA)
        assert inner.n_calls == 2 and cached.hits == 1


def test_a_plain_llm_answers_structured_calls_through_generate(path: Path) -> None:
    inner = FakeLLM('{"items": []}')
    with CachedLLM(inner, path) as cached:
        assert cached.generate_structured("p", SCHEMA).text == '{"items": []}'
        assert inner.n_calls == 1 and inner.calls[0].schema is None


def test_identity_is_derived_from_the_llm(path: Path) -> None:
    class Client:
        model_name = "gpt-x"
        model = "ignored: model_name comes first"
        temperature = 0.2
        stop = ("END",)
        max_tokens = None  # None is left out
        seed = object()  # not JSON: left out
        top_p = float("nan")  # not JSON: left out
        latency = 3  # not a generation setting

        def generate(self, prompt: str) -> str:
            return "ok"

    with CachedLLM(Client(), path) as cached:
        assert cached.model_id == f"{__name__}.{Client.__qualname__}:gpt-x"
        assert cached.params == {"temperature": 0.2, "stop": ["END"]}

    def answer(prompt: str) -> str:
        return "ok"

    with CachedLLM(answer, path) as cached:
        assert cached.model_id == f"{__name__}.{answer.__qualname__}" and cached.params == {}
        assert cached.generate("p").text == "ok"

    with CachedLLM(FakeLLM(), path) as cached:
        assert cached.model_id == "selfrag_core.testing.FakeLLM" and cached.params == {}


def test_cache_identity_wins_over_attributes(path: Path) -> None:
    class Identified(FakeLLM):
        model_name = "not used"
        temperature = 0.9

        @property
        def cache_identity(self) -> dict[str, Any]:
            return {"model": "mine:v1", "temperature": 0.0, "stop": ["x"]}

    with CachedLLM(Identified(), path) as cached:
        assert cached.model_id == "mine:v1" and cached.params == {"temperature": 0.0, "stop": ["x"]}
    with CachedLLM(Identified(), path, model_id="explicit", params={"k": 1}) as cached:
        assert cached.model_id == "explicit" and cached.params == {"k": 1}


def test_bad_identity_is_a_configuration_error(path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a JSON value"):
        CachedLLM(FakeLLM(), path, params={"client": object()})
    with pytest.raises(ConfigurationError, match="model_id"):
        CachedLLM(FakeLLM(), path, model_id="  ")


# ---------------------------------------------------------------------- what is recorded


def test_token_counts_survive_a_round_trip(path: Path) -> None:
    inner = TokenLLM()
    with CachedLLM(inner, path) as cached:
        assert cached.generate("hello") == LLMOutput("echo hello", 5, 7)
    with CachedLLM(inner, path, replay=True) as cached:
        assert cached.generate("hello") == LLMOutput("echo hello", 5, 7)
        reply = call_llm_detailed(cached, "hello")  # as the engine sees it
        assert (reply.text, reply.input_tokens, reply.output_tokens) == ("echo hello", 5, 7)
    assert inner.calls == 1


def test_errors_are_not_recorded(path: Path) -> None:
    inner = FakeLLM(["first answer"], fail_on=[1])
    with CachedLLM(inner, path) as cached:
        with pytest.raises(ConnectionError):
            cached.generate("p")
        assert len(cached) == 0 and cached.misses == 1
        assert cached.generate("p").text == "first answer"
        assert len(cached) == 1 and cached.misses == 2 and inner.n_calls == 2


def test_empty_replies_are_not_recorded_so_the_retry_reaches_the_model(path: Path) -> None:
    inner = FakeLLM(["", "   \n", "real answer"])
    with CachedLLM(inner, path) as cached:
        assert call_llm_detailed(cached, "p", retries=2, sleep=no_sleep).text == "real answer"
        assert inner.n_calls == 3 and len(cached) == 1
        assert cached.generate("p").text == "real answer" and inner.n_calls == 3


def test_a_replay_miss_is_not_retried_by_the_library(path: Path) -> None:
    with CachedLLM(FakeLLM(), path, replay=True) as cached, pytest.raises(CacheMissError) as caught:
        call_llm_detailed(cached, "p", retries=3, sleep=no_sleep)
    assert caught.value.attempts == 1


# ---------------------------------------------------------------------- async


async def test_async_path_shares_entries_with_the_sync_path(path: Path) -> None:
    inner = FakeStructuredLLM(lambda prompt: f"reply to {prompt}")
    with CachedLLM(inner, path) as cached:
        assert (await cached.agenerate("a")).text == "reply to a"
        assert inner.calls[0].is_async  # the inner LLM's own async path
        assert cached.generate("a").text == "reply to a"  # recorded async, hit sync
        cached.generate("b")
        assert (await cached.agenerate("b")).text == "reply to b"  # recorded sync, hit async
        assert (await cached.agenerate_structured("a", SCHEMA)).text == "reply to a"
        assert inner.calls[-1].schema == SCHEMA and inner.calls[-1].is_async
        assert cached.generate_structured("a", SCHEMA).text == "reply to a"
        assert inner.n_calls == 3 and (cached.hits, cached.misses) == (3, 3)
        reply = await acall_llm_detailed(cached, "a")
        assert reply.text == "reply to a" and inner.n_calls == 3
    with CachedLLM(FakeStructuredLLM(), path, replay=True) as cached:  # the same model id
        with pytest.raises(CacheMissError):
            await cached.agenerate("never recorded")
        assert (await cached.agenerate("b")).text == "reply to b"


async def test_async_calls_of_a_sync_only_llm_run_off_the_event_loop(path: Path) -> None:
    inner = SyncOnlyFakeLLM("slow answer", latency=0.2)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    with CachedLLM(inner, path) as cached:
        assert (await cached.agenerate("p")).text == "slow answer"
    ticker.cancel()
    assert inner.calls[0].thread != threading.current_thread().name
    assert ticks >= 5  # the loop kept running during the 0.2 s call


async def test_concurrent_async_calls_with_one_prompt_make_one_model_call(path: Path) -> None:
    inner = FakeLLM("shared", latency=0.05)
    with CachedLLM(inner, path) as cached:
        replies = await asyncio.gather(*(cached.agenerate("same") for _ in range(10)))
        assert {r.text for r in replies} == {"shared"}
        assert inner.n_calls == 1 and (cached.hits, cached.misses) == (9, 1)


async def test_a_cancelled_call_lets_a_waiter_call_the_model(path: Path) -> None:
    inner = FakeLLM("answer", latency=0.2)
    with CachedLLM(inner, path) as cached:
        first = asyncio.create_task(cached.agenerate("p"))
        await asyncio.sleep(0.02)
        second = asyncio.create_task(cached.agenerate("p"))
        await asyncio.sleep(0.02)
        first.cancel()
        assert (await second).text == "answer"
        assert inner.n_calls == 2 and len(cached) == 1


# ---------------------------------------------------------------------- threads and processes


def test_threads_record_each_prompt_once(path: Path) -> None:
    inner = FakeLLM(lambda prompt: f"answer to {prompt}", latency=0.002)
    prompts = [f"question {i}" for i in range(20)]
    with CachedLLM(inner, path) as cached:

        def work(worker: int) -> list[tuple[str, str]]:
            order = prompts[worker:] + prompts[:worker]  # every thread in another order
            return [(p, cached.generate(p).text) for p in order]

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = [pair for pairs in pool.map(work, range(8)) for pair in pairs]

        assert len(results) == 160 and all(text == f"answer to {p}" for p, text in results)
        assert len(cached) == 20 and inner.n_calls == 20
        assert sorted(inner.prompts) == sorted(prompts)
        assert (cached.hits, cached.misses) == (140, 20)


def test_a_sync_and_an_async_caller_share_one_model_call(path: Path) -> None:
    inner = FakeLLM("one", latency=0.1)
    with CachedLLM(inner, path) as cached:
        thread = threading.Thread(target=cached.generate, args=("p",))
        thread.start()

        async def later() -> str:
            await asyncio.sleep(0.03)
            return (await cached.agenerate("p")).text

        assert asyncio.run(later()) == "one"
        thread.join()
        assert inner.n_calls == 1 and cached.hits == 1


CHILD = """
import json, sys
from selfrag_core.replay import CachedLLM
from selfrag_core.testing import FakeLLM

path, mode, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
inner = FakeLLM(lambda prompt: f"{tag}:{prompt}")
with CachedLLM(inner, path, model_id="shared", replay=mode == "replay") as cached:
    answers = {f"p{i}": cached.generate(f"p{i}").text for i in range(count)}
print(json.dumps({"answers": answers, "calls": inner.n_calls}))
"""


def child(path: Path, mode: str, tag: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode, tag, str(count)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def test_processes_share_one_file(path: Path) -> None:
    # two processes record the same 30 prompts at once: one entry each, and each process
    # answers with the recorded reply, whichever process recorded it
    a, b = child(path, "record", "A", 30), child(path, "record", "B", 30)
    first, second = finished(a), finished(b)
    assert first["answers"] == second["answers"]
    assert all(text in (f"A:{p}", f"B:{p}") for p, text in first["answers"].items())

    inner = FakeLLM("parent")
    with CachedLLM(inner, path, model_id="shared", replay=True) as cached:
        assert len(cached) == 30
        assert {f"p{i}": cached.generate(f"p{i}").text for i in range(30)} == first["answers"]
        assert inner.n_calls == 0
    with CachedLLM(inner, path, model_id="shared") as cached:
        cached.generate("p30")  # recorded here, replayed there
    replayed = finished(child(path, "replay", "C", 31))
    assert replayed["calls"] == 0 and replayed["answers"]["p30"] == "parent"


# ---------------------------------------------------------------------- the file


def test_a_corrupt_file_is_a_configuration_error(path: Path) -> None:
    path.write_bytes(b"this is not a database\n" * 100)
    with pytest.raises(ConfigurationError) as caught:
        CachedLLM(FakeLLM(), path)
    assert str(path) in str(caught.value) and "delete it or choose another path" in str(caught.value)


def test_a_directory_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=str(tmp_path)):
        CachedLLM(FakeLLM(), tmp_path)


class ConvertingElsewhere:
    """A connection to a file another process is converting to WAL at the same moment:
    SQLite answers "database is locked" at once, without its busy handler, ``busy`` times."""

    def __init__(self, db: sqlite3.Connection, busy: int) -> None:
        self.db, self.busy, self.refused = db, busy, 0

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        if sql.startswith("PRAGMA journal_mode") and self.refused < self.busy:
            self.refused += 1
            raise sqlite3.OperationalError("database is locked")
        return self.db.execute(sql, args)

    def close(self) -> None:
        self.db.close()


def connecting(monkeypatch: pytest.MonkeyPatch, busy: int) -> list[ConvertingElsewhere]:
    made: list[ConvertingElsewhere] = []
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> ConvertingElsewhere:
        made.append(ConvertingElsewhere(real(*args, **kwargs), busy))
        return made[-1]

    monkeypatch.setattr("selfrag_core.replay.sqlite3.connect", connect)
    monkeypatch.setattr("selfrag_core.replay.time.sleep", no_sleep)
    return made


def test_a_file_another_process_is_converting_is_waited_for(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the CI failure this fixes: two processes opening a new cache together, one refused
    made = connecting(monkeypatch, busy=3)
    with CachedLLM(FakeLLM("x"), path) as cached:
        cached.generate("p")
        assert cached._execute("PRAGMA journal_mode")[0] == [("wal",)]
    assert made[0].refused == 3


def test_a_file_locked_past_the_busy_timeout_is_a_cache_locked_error(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connecting(monkeypatch, busy=10**9)
    monkeypatch.setattr("selfrag_core.replay._BUSY_TIMEOUT_S", 0.05)
    with pytest.raises(CacheLockedError, match="stayed locked"):
        CachedLLM(FakeLLM(), path)


def test_parent_folders_are_created_and_the_file_is_wal(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "replies.sqlite"
    with CachedLLM(FakeLLM(), path) as cached:
        cached.generate("p")
        assert cached._execute("PRAGMA journal_mode")[0] == [("wal",)]
    assert path.is_file()


def test_a_closed_cache_refuses_calls(path: Path) -> None:
    cached = CachedLLM(FakeLLM(), path)
    cached.close()
    cached.close()  # idempotent
    with pytest.raises(ConfigurationError, match="closed"):
        cached.generate("p")


# ---------------------------------------------------------------------- whole strategy runs

COMPLEX = "What are the causes and effects of climate change, and how do they compare to deforestation?"
SUBS = ["What causes climate change?", "What are the effects of climate change?", "What is deforestation?"]
DOCS = [
    "Climate change is caused by greenhouse gas emissions.",
    "Effects of climate change include rising seas.",
    "Deforestation is the clearing of forests.",
]


def recursive_script(prompt: str) -> LLMOutput:
    if "SUBQUESTIONS:" in prompt:
        text = json.dumps({"items": SUBS})
    elif "Combine the answers" in prompt:
        text = "merged answer"
    else:
        text = f"leaf answer {sum(map(ord, prompt)) % 997}"  # depends on the prompt
    return LLMOutput(text, input_tokens=len(prompt), output_tokens=len(text))


def recursive(llm: Any) -> RecursiveRAG:
    return RecursiveRAG(FakeRetriever(list(DOCS)), llm, RecursiveRAGConfig())


Run = Callable[[Any, str], Any]


def run_sync(strategy: Any, query: str) -> Any:
    return strategy.query(query)


def run_async(strategy: Any, query: str) -> Any:
    return asyncio.run(strategy.aquery(query))


@pytest.mark.parametrize("run", [run_sync, run_async], ids=["sync", "async"])
def test_a_recursive_run_replays_without_the_model(path: Path, run: Run) -> None:
    recorder_llm = FakeLLM(recursive_script)  # type: ignore[arg-type]  # LLMOutput replies
    with CachedLLM(recorder_llm, path) as cached:
        recorded = run(recursive(cached), COMPLEX)
        assert recorder_llm.n_calls == cached.misses == 5 == len(cached)  # decompose, 3 leaves, merge
    assert recorded.decomposed and recorded.answer == "merged answer"

    fresh = FakeLLM("the model must not be called")
    with CachedLLM(fresh, path, replay=True) as replaying:
        replayed = run(recursive(replaying), COMPLEX)
    assert fresh.n_calls == 0 and replaying.hits == 5
    assert replayed.answer == recorded.answer
    assert [s.answer for s in replayed.sub_answers] == [s.answer for s in recorded.sub_answers]
    assert replayed.trace.input_tokens == recorded.trace.input_tokens > 0
    assert replayed.trace.output_tokens == recorded.trace.output_tokens > 0


@pytest.mark.parametrize("run", [run_sync, run_async], ids=["sync", "async"])
def test_a_self_rag_run_replays_without_the_model(
    path: Path, run: Run, backend: FakeRetriever, instant: ExecutionConfig
) -> None:
    good = "Paris is the capital of France."
    recorder_llm = FakeLLM(judge_json(good, 9))

    def strategy(llm: Any) -> SelfIRAG:
        return SelfIRAG(backend, llm, SelfRAGConfig(), execution=instant)

    with CachedLLM(recorder_llm, path) as cached:
        recorded = run(strategy(cached), "What is the capital of France?")
    fresh = FakeLLM("unused")
    with CachedLLM(fresh, path, replay=True) as replaying:
        replayed = run(strategy(replaying), "What is the capital of France?")
    assert replayed.answer == recorded.answer == good and replayed.confidence == recorded.confidence
    assert fresh.n_calls == 0 and replaying.hits == recorder_llm.n_calls >= 1


@pytest.mark.parametrize("run", [run_sync, run_async], ids=["sync", "async"])
def test_a_replay_miss_stops_the_query_instead_of_a_fallback(path: Path, run: Run) -> None:
    recorder_llm = FakeLLM(recursive_script)  # type: ignore[arg-type]
    with CachedLLM(recorder_llm, path) as cached:
        run(recursive(cached), COMPLEX)
    fresh = FakeLLM("unused")
    with CachedLLM(fresh, path, replay=True) as replaying, pytest.raises(CacheMissError):
        # another question: the decomposition prompt was never recorded
        run(recursive(replaying), COMPLEX.replace("deforestation", "urbanisation"))
    assert fresh.n_calls == 0


# ---------------------------------------------------------------------- LocalLLM


def test_local_llm_cache_identity_without_loading_a_model(path: Path) -> None:
    from selfrag_core.local.llm import LocalLLM

    local = LocalLLM.__new__(LocalLLM)  # the attributes __init__ sets, no model loaded
    local.name = "smollm2-135m"
    local.model_path = Path("/models/SmolLM2-135M-Instruct-Q8_0.gguf")
    local.chat = True
    local.n_ctx, local.n_threads, local.max_tokens, local.structured_max_tokens = 2048, 2, 192, 256
    local.hold_end_after_colon, local.item_max_chars, local.string_max_chars = True, 100, 600
    local.system_prompt, local.stop = None, []
    local._sampling = {"temperature": 0, "repeat_penalty": 1.1, "seed": 0}

    identity = local.cache_identity
    assert identity["model"] == "smollm2-135m:SmolLM2-135M-Instruct-Q8_0.gguf"
    assert identity["temperature"] == 0.0 and isinstance(identity["temperature"], float)
    assert json.loads(json.dumps(identity)) == identity  # JSON values only
    assert "n_threads" not in identity
    with CachedLLM(local, path) as cached:
        assert cached.model_id == identity["model"]
        assert cached.params == {k: v for k, v in identity.items() if k != "model"}
        before = cached.key("p")
    local.max_tokens = 64
    with CachedLLM(local, path) as cached:
        assert cached.key("p") != before  # a setting that changes the replies changes the key


# ---------------------------------------------------------------------- a locked file


@pytest.fixture
def locked(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sqlite3.Connection]:
    """A second connection holding the file's write lock (as another process's writer
    would); the cache gives up waiting for it after 50 ms instead of 30 s."""
    monkeypatch.setattr("selfrag_core.replay._BUSY_TIMEOUT_S", 0.05)
    CachedLLM(FakeLLM(), path).close()  # the file and its table exist
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_locked_file_is_the_librarys_retryable_error(
    path: Path, locked: sqlite3.Connection, use_async: bool
) -> None:
    with CachedLLM(FakeLLM("the answer"), path) as cached, pytest.raises(CacheLockedError) as caught:
        if use_async:
            await cached.agenerate("p")
        else:
            cached.generate("p")
    error = caught.value
    assert isinstance(error, RAGSystemError) and not isinstance(error, sqlite3.Error)
    assert error.retryable and error.path == path
    assert str(path) in str(error) and "locked" in str(error) and "retried" in str(error)
    assert isinstance(error.__cause__, sqlite3.OperationalError)


def test_the_librarys_retry_records_the_reply_once_the_lock_is_released(
    path: Path, locked: sqlite3.Connection
) -> None:
    inner = FakeLLM("the answer")
    with CachedLLM(inner, path) as cached:
        reply = call_llm_detailed(cached, "p", retries=2, sleep=lambda _: locked.execute("ROLLBACK"))
        assert reply.text == "the answer" and reply.attempts == 2
        assert len(cached) == 1 and cached.generate("p").text == "the answer" and inner.n_calls == 2

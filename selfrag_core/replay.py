"""Record and replay LLM replies: :class:`CachedLLM`.

The first call with a prompt calls the model and records its reply in one SQLite file;
every later call with the same key (the model, its generation settings, the prompt and
the JSON schema) answers from the file, with the token counts as recorded. An evaluation
run a second time therefore makes no LLM call, and a test can replay a real model's
recorded replies offline (``CachedLLM(None, path, model_id=..., replay=True)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import json
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from selfrag_core.errors import ConfigurationError, RAGSystemError
from selfrag_core.llm import _ainvoke_once, _invoke_once, to_reply
from selfrag_core.protocols import LLMOutput
from selfrag_core.workers import blocking, unsuspended

__all__ = ["CacheLockedError", "CacheMissError", "CachedLLM"]

#: how the model is called: ``invoke(llm, prompt, schema)``
_Invoke = Callable[[Any, str, dict[str, Any] | None], Awaitable[Any]]

#: attributes that name the model, the first string one is used (see ``CachedLLM.model_id``)
_NAME_ATTRIBUTES = ("model_name", "model", "model_id", "model_path", "name")
#: attributes that change a model's replies (LangChain and LlamaIndex keep them as attributes)
_PARAM_ATTRIBUTES = (
    "temperature", "top_p", "top_k", "max_tokens", "max_new_tokens", "num_predict", "seed", "stop", "n_ctx",
)  # fmt: skip
_BUSY_TIMEOUT_S = 30.0
_INSERT = "INSERT OR IGNORE INTO llm_replies VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    params TEXT NOT NULL,
    prompt TEXT NOT NULL,
    schema TEXT,
    text TEXT NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    created REAL NOT NULL
)
"""


class CacheMissError(ConfigurationError):
    """A replaying :class:`CachedLLM` has no recorded reply for a prompt.

    A :class:`~selfrag_core.errors.ConfigurationError`: the query stops (no retry, no
    fallback). ``path``, ``model_id``, ``prompt`` and ``key`` say what was looked up."""

    def __init__(self, message: str, *, path: Path, model_id: str, prompt: str, key: str) -> None:
        super().__init__(message, component="LLM")
        self.path = path
        self.model_id = model_id
        self.prompt = prompt
        self.key = key


class CacheLockedError(RAGSystemError):
    """Another connection (a process writing to the same file) held the replay cache
    locked for longer than the busy timeout (30 s). Retryable: the library's retry of the
    LLM call tries again; ``path`` is the file."""

    retryable = True

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_safe(value: Any) -> tuple[bool, Any]:
    """Whether ``value`` is JSON (no NaN), and its JSON form (tuples become lists)."""
    try:
        return True, json.loads(_canonical(value))
    except (TypeError, ValueError):
        return False, None


def _attribute(obj: Any, name: str) -> Any:
    try:  # a property may raise anything (pydantic models, proxies)
        return getattr(obj, name, None)
    except Exception:
        return None


def _identity(llm: Any) -> Mapping[str, Any] | None:
    identity = _attribute(llm, "cache_identity")
    return identity if isinstance(identity, Mapping) else None


def _derive_model_id(llm: Any) -> str:
    identity = _identity(llm)
    if identity is not None and isinstance(identity.get("model"), str) and identity["model"]:
        return str(identity["model"])
    owner = llm if inspect.isroutine(llm) else type(llm)
    model_id = f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', type(llm).__name__)}"
    names = (_attribute(llm, name) for name in _NAME_ATTRIBUTES)
    name = next((value for value in names if isinstance(value, str) and value), None)
    return model_id if name is None else f"{model_id}:{name}"


def _derive_params(llm: Any) -> dict[str, Any]:
    identity = _identity(llm)
    if identity is not None:
        return _checked_params({k: v for k, v in identity.items() if k != "model"}, "cache_identity")
    params = {name: _json_safe(_attribute(llm, name)) for name in _PARAM_ATTRIBUTES}
    return {name: normal for name, (safe, normal) in params.items() if safe and normal is not None}


def _checked_params(params: Mapping[str, Any], what: str) -> dict[str, Any]:
    checked: dict[str, Any] = {}
    for name, value in params.items():
        safe, normal = _json_safe(value)
        if not isinstance(name, str) or not safe:
            raise ConfigurationError(
                f"CachedLLM {what}[{name!r}] = {value!r} is not a JSON value: the cache key is JSON; "
                "give strings, numbers, booleans, None, lists or dicts of them"
            )
        checked[name] = normal
    return checked


def _count(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # a waiter that was cancelled meanwhile
        waiter.set_result(None)


def _wake(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None], _: Future[None]) -> None:
    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_resolve, waiter)


def _to_wal(db: sqlite3.Connection) -> None:
    """Put the file in WAL mode (readers never wait for a writer), waiting out other
    processes that open it at the same moment. SQLite answers "database is locked" at once,
    without its busy handler, when two connections convert a new file together (waiting
    could deadlock them), so the wait is here, up to the same busy timeout."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    pause = 0.005
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            transient = any(word in str(e) for word in ("locked", "busy"))
            if not transient or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


class CachedLLM:
    """An LLM that records the replies of ``llm`` in the SQLite file ``path`` and answers
    from it (see the module docstring).

    Only non-empty replies are recorded, once per key: the first recording wins, and a
    caller that raced it gets the recorded reply; errors and empty replies are not
    recorded (the library's retry calls the model again). The file may be shared by
    threads and processes (not on a network file system); concurrent calls with one key
    in one process make one model call. A streaming query gets each reply as one piece.
    One prompt has one reply: with a sampling model, calls that repeat a prompt to get
    different replies (HyDE's ``num_hypothetical_docs`` > 1) all get the first one.

    ``llm``: any LLM the library accepts (``generate(prompt)`` object, LangChain model,
    LlamaIndex LLM, callable; sync or async); None only with ``replay=True`` and an
    explicit ``model_id``.
    ``model_id``: names the model in the key. Derived when not given: the LLM's
    ``cache_identity["model"]`` (``LocalLLM`` has one), else its class (a function's own
    name) plus ``":"`` and the first string among its ``model_name``, ``model``,
    ``model_id``, ``model_path``, ``name``.
    ``params``: the settings that change the replies, in the key. Derived when not given:
    the rest of ``cache_identity``, else the JSON values (None left out) of the LLM's
    ``temperature``, ``top_p``, ``top_k``, ``max_tokens``, ``max_new_tokens``,
    ``num_predict``, ``seed``, ``stop``, ``n_ctx``. Give both explicitly to replay
    without the recording model (``llm=None``) or to keep a recording across versions of
    a client library.
    ``replay``: never call the model; a miss raises :class:`CacheMissError`, a
    ConfigurationError: the query stops (never retried, never answered with a fallback).
    ``namespace``: keeps these recordings apart from others of the same prompts in the
    file (``selfrag eval`` records each contender apart by default).
    ``fallback_namespaces``: where to look, in order, when ``namespace`` holds no reply
    for a key: the first reply recorded under one of them (same model, params, prompt
    and schema) answers and is recorded under ``namespace`` too, even with
    ``replay=True`` (``selfrag eval --shared-replies`` reuses each contender's earlier
    recordings this way). Counted as a hit, and in ``borrowed``.
    ``hits`` / ``misses``: calls answered from the file / by the model (the model calls).
    Raises ConfigurationError when ``path`` is not a SQLite file or cannot be opened, or
    for a ``model_id`` / ``params`` the key cannot hold; :class:`CacheLockedError`
    (retryable) when another writer keeps the file locked past the busy timeout.
    """

    def __init__(
        self,
        llm: Any,
        path: str | Path,
        *,
        model_id: str | None = None,
        params: Mapping[str, Any] | None = None,
        replay: bool = False,
        namespace: str = "",
        fallback_namespaces: Sequence[str] = (),
    ) -> None:
        if llm is None and not replay:
            raise ConfigurationError(
                "CachedLLM needs an LLM to record with; llm=None works only with replay=True"
            )
        if model_id is not None and (not isinstance(model_id, str) or not model_id.strip()):
            raise ConfigurationError(f"model_id must be a non-empty string, got {model_id!r}")
        if llm is None and model_id is None:
            raise ConfigurationError(
                "CachedLLM(None, ..., replay=True) needs the model_id the replies were recorded with"
            )
        self.llm = llm
        self.path = Path(path).expanduser()
        self.model_id: str = model_id if model_id is not None else _derive_model_id(llm)
        if params is not None:
            self.params: dict[str, Any] = _checked_params(params, "params")
        else:
            self.params = {} if llm is None else _derive_params(llm)
        self.replay = replay
        self.namespace = str(namespace)
        if isinstance(fallback_namespaces, str):
            raise ConfigurationError(
                f"fallback_namespaces is a list of namespaces, got the string {fallback_namespaces!r}"
            )
        self.fallback_namespaces = tuple(
            dict.fromkeys(str(n) for n in fallback_namespaces if str(n) != self.namespace)
        )
        self.hits = 0
        self.borrowed = 0  # hits answered from a fallback namespace (and recorded under ``namespace``)
        self.misses = 0
        self._lock = threading.Lock()  # counters and flights
        self._db_lock = threading.Lock()  # the connection
        self._flights: dict[str, Future[None]] = {}  # the model calls in progress, by key
        self._db: sqlite3.Connection | None = self._open()

    def __repr__(self) -> str:
        mode = "replay" if self.replay else "record"
        counts = f"hits={self.hits}, misses={self.misses}"
        return f"CachedLLM({self.model_id!r}, {str(self.path)!r}, {mode}, {counts})"

    # ------------------------------------------------------------------ the file
    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as e:
            raise ConfigurationError(f"cannot open the replay cache {self.path}: {e}") from e
        try:
            _to_wal(db)
            db.execute("PRAGMA synchronous = NORMAL")  # a cache may lose its last replies on power loss
            db.execute(_SCHEMA)
        except sqlite3.Error as e:
            db.close()
            self._reraise(e)
        return db

    def _reraise(self, error: sqlite3.Error) -> NoReturn:
        """Raise ``error`` as the library error it stands for: a :class:`CacheLockedError`
        when the file stayed locked past the busy timeout (transient: the library's retry
        may succeed), a ConfigurationError when the file cannot be used; a bug as it is."""
        if isinstance(error, sqlite3.OperationalError):
            if any(word in str(error) for word in ("locked", "busy")):
                raise CacheLockedError(
                    f"the replay cache {self.path} stayed locked by another connection for "
                    f"{_BUSY_TIMEOUT_S:g}s ({error}); the LLM call is retried. If it persists, let "
                    "the other process finish its writes, or give each process its own cache file",
                    path=self.path,
                ) from error
            raise ConfigurationError(
                f"the replay cache {self.path} cannot be used ({error}); "
                "check the path and its permissions, or choose another path"
            ) from error
        if type(error) is sqlite3.DatabaseError:  # not a database, or a damaged one
            raise ConfigurationError(
                f"the replay cache {self.path} is not a readable SQLite file ({error}); "
                "delete it or choose another path"
            ) from error
        raise error

    def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> tuple[list[Any], int]:
        """The rows and the row count of one statement (the connection is shared by threads)."""
        with self._db_lock:
            if self._db is None:
                raise ConfigurationError(f"the CachedLLM on {self.path} is closed")
            try:
                cursor = self._db.execute(sql, args)
                return cursor.fetchall(), cursor.rowcount
            except sqlite3.Error as e:
                self._reraise(e)

    def _lookup(self, key: str) -> LLMOutput | None:
        rows, _ = self._execute(
            "SELECT text, input_tokens, output_tokens FROM llm_replies WHERE key = ?", (key,)
        )
        return LLMOutput(*rows[0]) if rows else None

    def _store(self, key: str, prompt: str, schema: Mapping[str, Any] | None, output: LLMOutput) -> LLMOutput:
        """``output`` recorded under ``key``, or the recording another caller made first."""
        schema_json = None if schema is None else _canonical(dict(schema))
        row = (key, self.model_id, _canonical(self.params), prompt, schema_json)
        _, stored = self._execute(
            _INSERT,
            (*row, output.text, output.input_tokens, output.output_tokens, time.time()),
        )
        if stored:
            return output
        return self._lookup(key) or output  # another caller recorded this key first

    def __bool__(self) -> bool:
        return True  # an LLM, even while its file is empty (``if not llm`` must not reject it)

    def __len__(self) -> int:
        """Replies recorded in the file (for every model)."""
        rows, _ = self._execute("SELECT COUNT(*) FROM llm_replies")
        return int(rows[0][0])

    def recorded_after(self, rowid: int = 0) -> tuple[list[tuple[Any, ...]], int]:
        """The replies recorded in the file after row ``rowid`` (every model's, as rows
        :meth:`add_recorded` takes), and the last row's id (``rowid`` when none is new).
        A worker of a distributed evaluation sends these to the one process that writes
        the run's cache file."""
        rows, _ = self._execute("SELECT rowid, * FROM llm_replies WHERE rowid > ? ORDER BY rowid", (rowid,))
        return [tuple(row[1:]) for row in rows], (rows[-1][0] if rows else rowid)

    def add_recorded(self, rows: Sequence[tuple[Any, ...]]) -> int:
        """Record ``rows`` (from :meth:`recorded_after`) in this file, each key once (a key
        recorded already keeps its reply); the rows added."""
        added = 0
        for row in rows:
            _, stored = self._execute(
                "INSERT OR IGNORE INTO llm_replies VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row
            )
            added += max(stored, 0)
        return added

    def close(self) -> None:
        """Close the file (the object cannot answer afterwards)."""
        with self._db_lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> CachedLLM:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ keys
    def key(
        self, prompt: str, schema: Mapping[str, Any] | None = None, *, namespace: str | None = None
    ) -> str:
        """The SHA-256 (hex) of the canonical JSON of the model id, the params, the prompt,
        the schema and the namespace (this object's unless ``namespace`` is given): a
        changed setting, prompt template or schema is a different key."""
        document = {
            "model": self.model_id,
            "params": self.params,
            "prompt": prompt,
            "schema": None if schema is None else dict(schema),
        }
        space = self.namespace if namespace is None else namespace
        if space:
            document["namespace"] = space
        return hashlib.sha256(_canonical(document).encode("utf-8")).hexdigest()

    def _borrow(self, key: str, prompt: str, schema: Mapping[str, Any] | None) -> LLMOutput | None:
        """The first reply recorded for the prompt under a fallback namespace, recorded
        under ``key`` as well (the recording there, when another caller made one first)."""
        for space in self.fallback_namespaces:
            found = self._lookup(self.key(prompt, schema, namespace=space))
            if found is not None:
                with self._lock:
                    self.borrowed += 1
                return self._store(key, prompt, schema, found)
        return None

    def _hit(self, key: str, prompt: str, schema: Mapping[str, Any] | None) -> LLMOutput | None:
        found = self._lookup(key) or self._borrow(key, prompt, schema)
        if found is not None:
            with self._lock:
                self.hits += 1
        return found

    def _missing(self, key: str, prompt: str) -> CacheMissError:
        shown = prompt[:80] + ("..." if len(prompt) > 80 else "")
        return CacheMissError(
            f"no reply recorded in the replay cache {self.path} for model {self.model_id!r} and prompt "
            f"{shown!r} (with these params and schema); run once without replay (replay=False) to record it",
            path=self.path,
            model_id=self.model_id,
            prompt=prompt,
            key=key,
        )

    def _board(self, key: str) -> tuple[Future[None], bool]:
        """The flight for ``key`` (its model call) and whether this caller flies it (makes
        the call), else waits for it."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is None:
                flight = self._flights[key] = Future()
                return flight, True
        return flight, False

    def _land(self, key: str, flight: Future[None]) -> None:
        with self._lock:
            del self._flights[key]
        flight.set_result(None)

    # ------------------------------------------------------------------ the LLM protocols
    def generate(self, prompt: str) -> LLMOutput:
        return unsuspended(self._answer(prompt, None, None, blocking(_invoke_once)))

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        return unsuspended(self._answer(prompt, schema, None, blocking(_invoke_once)))

    async def agenerate(self, prompt: str) -> LLMOutput:
        return await self._answer(prompt, None, asyncio.get_running_loop(), _ainvoke_once)

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        return await self._answer(prompt, schema, asyncio.get_running_loop(), _ainvoke_once)

    async def _answer(
        self,
        prompt: str,
        schema: dict[str, Any] | None,
        loop: asyncio.AbstractEventLoop | None,
        invoke: _Invoke,
    ) -> LLMOutput:
        """The recorded reply, else the model's. A caller with the same key in flight is
        waited for: on ``loop``, else blocking (the sync path, where ``invoke`` blocks too)."""
        key = self.key(prompt, schema)
        while (found := self._hit(key, prompt, schema)) is None:
            if self.replay:
                raise self._missing(key, prompt)
            flight, flies = self._board(key)
            if flies:
                try:
                    return await self._fly(key, prompt, schema, invoke)
                finally:
                    self._land(key, flight)
            if loop is None:
                flight.result()  # then look again: a failed or empty reply was not recorded
            else:
                landed = loop.create_future()
                flight.add_done_callback(functools.partial(_wake, loop, landed))
                await landed
        return found

    async def _fly(self, key: str, prompt: str, schema: dict[str, Any] | None, invoke: _Invoke) -> LLMOutput:
        """The reply recorded since this caller looked, else the model's, recorded."""
        found = self._hit(key, prompt, schema)
        if found is not None:
            return found
        with self._lock:
            self.misses += 1
        reply = to_reply(await invoke(self.llm, prompt, schema))
        output = LLMOutput(reply.text, _count(reply.input_tokens), _count(reply.output_tokens))
        if not reply.text or not reply.text.strip():
            return output  # the caller rejects it and retries: the retry must reach the model
        return self._store(key, prompt, schema, output)

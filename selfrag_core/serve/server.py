"""``selfrag serve``: the app on uvicorn, with its command-line arguments. Importing this
module needs neither FastAPI nor uvicorn, so a CLI can add the arguments to its parser
unconditionally. With ``--workers N`` each process builds its own app (:func:`serve_workers`).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.serve.settings import METRICS_ENV, OTEL_ENV, TOKEN_ENV, ServeSettings, is_loopback

logger = logging.getLogger("selfrag.serve")

#: how a worker process learns which app to build (set by :func:`serve_workers`)
WORKER_ENV = "SELFRAG_SERVE_WORKER"
_NO_SHARED_STORE = (
    "--workers above 1 needs --index DIR or --backend SPEC: the workers share their documents through it"
)


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError as e:
        hint = "pip install 'selfrag[serve]'"
        raise MissingDependencyError(f"selfrag serve needs uvicorn ({e}): {hint}") from e
    return uvicorn


def run(
    host: str = "127.0.0.1",
    port: int = 8000,
    index_dir: str | None = None,
    llm_spec: str = "local",
    *,
    settings: ServeSettings | None = None,
    rag: Any = None,
    llm: Any = None,
    strategies: Mapping[str, Any] | None = None,
    log_level: str = "info",
    backend: str | None = None,
) -> None:
    """Serve :func:`build_app`'s app until interrupted: the strategies over the index in
    ``index_dir`` with the LLM ``llm_spec``, or over ``rag``, ``llm`` and ``strategies``
    already built; ``settings`` default to ``ServeSettings.from_env()``; ``backend`` (a
    ``--backend`` spec) wins over ``index_dir``."""
    _uvicorn()  # the install hint before any model loads
    app = build_app(
        index_dir, llm_spec, settings=settings, rag=rag, llm=llm, strategies=strategies, backend=backend
    )
    serve_forever(app, host, port, log_level)


def build_app(
    index_dir: str | None = None,
    llm_spec: str = "local",
    *,
    settings: ServeSettings | None = None,
    rag: Any = None,
    llm: Any = None,
    strategies: Mapping[str, Any] | None = None,
    backend: str | None = None,
) -> Any:
    """The app :func:`run` serves. ``backend`` (a spec for ``presets.open_backend``) wins
    over ``index_dir``; only an index directory is saved to after each change."""
    from selfrag_core.local import make_llm
    from selfrag_core.presets import backend_kind, open_backend
    from selfrag_core.serve.app import create_app

    spec = backend if backend is not None else index_dir
    settings = settings or ServeSettings.from_env()
    if backend_kind(spec) == "directory" and settings.index_dir is None:
        settings = dataclasses.replace(settings, index_dir=str(spec))
    rag = open_backend(spec) if rag is None else rag
    llm = make_llm(llm_spec) if llm is None else llm
    return create_app(rag=rag, llm=llm, strategies=strategies, settings=settings)


def freeze_startup_objects() -> None:
    """Exempt everything alive now (modules, index, models, the app) from garbage
    collection (``gc.freeze``): they live as long as the process."""
    gc.collect()
    gc.freeze()


def warn_if_open(host: str, token: str | None) -> None:
    """A warning at start when the server listens beyond loopback without a token."""
    if token is None and not is_loopback(host):
        logger.warning(
            "listening on %s without a bearer token: anyone who can reach it can query, add and delete "
            "documents; set %s to require 'Authorization: Bearer <token>'",
            host, TOKEN_ENV,
        )  # fmt: skip


def serve_forever(app: Any, host: str, port: int, log_level: str = "info") -> None:
    """Serve a built app in this process until interrupted."""
    uvicorn = _uvicorn()
    service = getattr(getattr(app, "state", None), "service", None)  # None: not create_app's
    if service is not None:
        warn_if_open(host, service.settings.api_token)
    freeze_startup_objects()
    grace = service.settings.shutdown_grace_s if service is not None else ServeSettings().shutdown_grace_s
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=_grace(grace))


def serve_workers(builder: str, args: argparse.Namespace, workers: int) -> None:
    """Serve with ``workers`` processes, each building its app with ``builder`` (``"module:function"``)
    from ``args``, passed as JSON through ``WORKER_ENV``. They share the index directory or the backend."""
    _import_builder(builder)  # fail here, not in every worker
    if not getattr(args, "index", None) and not getattr(args, "backend", None):
        raise ConfigurationError(_NO_SHARED_STORE)
    settings = ServeSettings.from_env()  # as every worker reads it
    warn_if_open(args.host, settings.api_token)
    plain = (str, int, float, bool, list, type(None))
    options = {k: v for k, v in vars(args).items() if isinstance(v, plain)}
    os.environ[WORKER_ENV] = json.dumps({"builder": builder, "args": options})
    _uvicorn().run(
        f"{__name__}:worker_app", factory=True, workers=workers, host=args.host, port=args.port,
        log_level=args.log_level, timeout_graceful_shutdown=_grace(settings.shutdown_grace_s),
    )  # fmt: skip


def _import_builder(builder: str) -> Any:
    module, sep, name = builder.partition(":")
    if not (module and sep and name):
        raise ConfigurationError(f"the app builder must be 'module:function', got {builder!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigurationError(f"cannot import the app builder {builder!r}: {e}") from e


def _grace(seconds: float) -> int:
    """uvicorn's ``timeout_graceful_shutdown`` for ``shutdown_grace_s``: whole seconds, 1 or more unless 0."""
    return max(1, round(seconds)) if seconds > 0 else 0


def worker_app() -> Any:
    """The app of one worker process (uvicorn's factory; see :func:`serve_workers`)."""
    spec = json.loads(os.environ[WORKER_ENV])
    app = _import_builder(spec["builder"])(argparse.Namespace(**spec["args"]))
    freeze_startup_objects()
    return app


def app_from_args(args: argparse.Namespace) -> Any:
    """The app that ``python -m selfrag_core.serve`` serves, from its parsed options."""
    from selfrag_core.presets import backend_kind

    backend = getattr(args, "backend", None)
    if backend is not None:  # an index directory it names is saved to, an external backend is not
        index = backend if backend_kind(backend) == "directory" else None
        args = argparse.Namespace(**{**vars(args), "index": index})
    return build_app(args.index, args.llm, settings=settings_from_args(args), backend=backend)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser, *, shared: bool = True) -> None:
    """The ``serve`` options. With ``shared=False`` the options a CLI parser already has
    (``--index``, ``--llm``, ``--max-llm-calls``, same names and dests) are left out."""
    defaults = ServeSettings()
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    add("--port", type=int, default=8000, help="port (default: 8000)")
    if shared:
        add("--index", metavar="DIR", help="index directory, saved after each change (default: in memory)")
        add(
            "--backend", metavar="SPEC",
            help="wins over --index: an index directory, chroma://HOST:PORT/COLLECTION (a Chroma server), "
                 "or your own backend, package.module:factory or file.py:factory",
        )  # fmt: skip
        add("--llm", default="local", help="fake, local (default), gemma, a .gguf path, provider:model")
        add("--max-llm-calls", type=int, default=defaults.max_llm_calls, help="LLM calls per query")
    add(
        "--max-concurrent",
        type=int,
        default=defaults.max_concurrent_queries,
        help="queries at once before 503",
    )
    add("--timeout", type=float, default=defaults.query_timeout, help="seconds per query before 504")
    add(
        "--admission-control",
        action=argparse.BooleanOptionalAction,
        default=defaults.admission_control,
        help="admit only the queries the measured service time says can finish within --timeout, "
        "answering the rest at once with 503 and Retry-After (default: on; --no-admission-control "
        "admits up to --max-concurrent)",
    )
    add(
        "--query-concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="queries that run at once, the others admitted waiting their turn (default: what the "
        "LLM declares, 1 for a local model; else up to --max-concurrent)",
    )
    add(
        "--workers",
        type=_positive_int,
        default=1,
        help="processes serving on the port (default 1); above 1 they share --index DIR or --backend",
    )
    add(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow a CORS origin (repeatable)",
    )
    for flag, variable, what in (
        ("metrics", METRICS_ENV, "serve Prometheus metrics at /metrics"),
        ("otel", OTEL_ENV, "record every query as OpenTelemetry spans"),
    ):
        add(f"--{flag}", action="store_true", help=f"{what} (or {variable}=1; pip install 'selfrag[{flag}]')")
    add("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.epilog = (
        f"Set {TOKEN_ENV} to require 'Authorization: Bearer <token>' on every endpoint but /healthz "
        "and /readyz."
    )


def settings_from_args(args: argparse.Namespace, index_dir: str | None = None) -> ServeSettings:
    """The settings given by :func:`add_arguments`' options (the token from the environment)."""
    settings = ServeSettings.from_env(
        max_concurrent_queries=args.max_concurrent,
        admission_control=getattr(args, "admission_control", True),
        query_concurrency=getattr(args, "query_concurrency", None),
        query_timeout=args.timeout,
        max_llm_calls=args.max_llm_calls,
        cors_origins=tuple(args.cors_origin),
        index_dir=index_dir if index_dir is not None else args.index,
    )
    flags: dict[str, Any] = {f: True for f in ("metrics", "otel") if getattr(args, f, False)}
    return dataclasses.replace(settings, **flags)  # else SELFRAG_METRICS and SELFRAG_OTEL decide


def run_from_args(args: argparse.Namespace) -> None:
    """Run the service as parsed by :func:`add_arguments`."""
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.workers > 1:
        serve_workers(f"{__name__}:app_from_args", args, args.workers)
    else:
        _uvicorn()  # the install hint before any model loads
        serve_forever(app_from_args(args), args.host, args.port, args.log_level)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m selfrag_core.serve", description="Serve selfrag over HTTP."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.workers > 1 and not args.index and not args.backend:
        parser.error(_NO_SHARED_STORE)
    run_from_args(args)

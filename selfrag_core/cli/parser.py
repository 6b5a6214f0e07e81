"""The commands' arguments and their help."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from selfrag_core.cli.commands import cmd_ask, cmd_delete, cmd_demo, cmd_index, cmd_mcp, cmd_serve, cmd_stats
from selfrag_core.cli.evaluate import cmd_eval
from selfrag_core.presets import (
    ADAPTIVE,
    BASELINE,
    DEFAULT_LLM_TIMEOUT,
    DEFAULT_QUERY_TIMEOUT,
    EMBEDDERS,
    STRATEGIES,
)
from selfrag_core.progress import INTERVAL as PROGRESS_INTERVAL
from selfrag_core.strategies.registry import BUILT_IN


def _version() -> str:
    from selfrag_core import __version__

    return __version__


#: ``selfrag ask``'s strategy unless --strategy says otherwise
DEFAULT_STRATEGY = "self"


def strategy_help() -> str:
    """``--strategy``'s help: the built-in strategies (``BUILT_IN``), those compared by default
    first, each with what it says of itself, then the strategies of your own."""
    names = sorted(BUILT_IN, key=lambda name: not BUILT_IN[name].compared)  # a stable sort
    about = {name: "default" if name == DEFAULT_STRATEGY else BUILT_IN[name].about for name in names}
    shown = [f"{name} ({about[name]})" if about[name] else name for name in names]
    return f"{', '.join(shown)}, or your own: package.module:Name or file.py:Name"


@dataclass(frozen=True)
class _Parents:
    """The option groups the commands share (argparse parents)."""

    common: argparse.ArgumentParser  # --index, -v, --plain: every command's
    backend: argparse.ArgumentParser  # --backend: the commands that read or write documents
    llm: argparse.ArgumentParser  # the LLM, retrieval and budget options: the commands that answer
    timing: argparse.ArgumentParser  # --llm-timeout, --timeout (`serve` has its own, per request)
    routing: argparse.ArgumentParser  # the adaptive strategy's router and call budget
    new_index: argparse.ArgumentParser  # --embedder, --chunk-size of a new index


def build_parser() -> argparse.ArgumentParser:
    """`selfrag`'s parser: its commands, each with its options and the shared groups."""
    parents = _Parents(
        _common_options(), _backend_option(), _llm_options(), _timing_options(), _routing_options(),
        _new_index_options(),
    )  # fmt: skip
    parser = argparse.ArgumentParser(
        prog="selfrag", description="Self-improving RAG over your documents, offline."
    )
    parser.add_argument("--version", action="version", version=f"selfrag {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _index_command, _delete_command, _ask_command, _demo_command, _eval_command, _stats_command,
        _serve_command, _mcp_command,
    ):  # fmt: skip
        add_command(sub, parents)
    return parser


def _common_options() -> argparse.ArgumentParser:
    """--index, -v and --plain: every command's."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--index", metavar="DIR", help="index directory (default: $SELFRAG_INDEX or the user data dir)"
    )
    common.add_argument("-v", "--verbose", action="store_true", help="log more (and list skipped files)")
    common.add_argument(
        "--plain", action="store_true",
        help=f"plain progress lines (count, rate, time left; every {PROGRESS_INTERVAL:g} s) instead of a bar",
    )  # fmt: skip
    return common


def _backend_option() -> argparse.ArgumentParser:
    """--backend: where the documents live."""
    backend_opt = argparse.ArgumentParser(add_help=False)
    backend_opt.add_argument(
        "--backend", metavar="SPEC",
        help="where the documents live, winning over --index: an index directory, "
             "chroma://HOST:PORT/COLLECTION (a Chroma server; vectors from --embedder), or your own "
             "backend object: package.module:factory or file.py:factory (called with no arguments, or "
             "embedder=)",
    )  # fmt: skip
    return backend_opt


def _llm_options() -> argparse.ArgumentParser:
    """The LLM, its limits, the retrieval's size and the verifier."""
    llm_opts = argparse.ArgumentParser(add_help=False)
    llm_opts.add_argument(
        "--llm", default="local",
        help="local (SmolLM2, default), gemma, a .gguf path, fake (no model), openai:MODEL (an "
             "OpenAI-compatible server, see --llm-base-url), or provider:model",
    )  # fmt: skip
    llm_opts.add_argument(
        "--llm-base-url", metavar="URL",
        help="the OpenAI-compatible server of --llm openai:MODEL, e.g. http://localhost:8080/v1 "
             "(default $SELFRAG_LLM_BASE_URL, $OPENAI_BASE_URL; the key is $OPENAI_API_KEY)",
    )  # fmt: skip
    llm_opts.add_argument(
        "--llm-max-tokens", type=int, metavar="N",
        help="the longest reply, in tokens (default: the model's; 192 for the local models' answers, "
             "whose JSON replies keep their own cap, 512 for openai:MODEL)",
    )  # fmt: skip
    llm_opts.add_argument(
        "--llm-temperature", type=float, metavar="T",
        help="sampling temperature, >= 0 (default 0: deterministic; a provider:model keeps its own default)",
    )  # fmt: skip
    llm_opts.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads of the local LLM (default: 2, or 1 on a busy machine)",
    )
    llm_opts.add_argument("--top-k", type=int, default=3, help="passages retrieved per search (default 3)")
    llm_opts.add_argument(
        "--verifier", metavar="SPEC",
        help="what decides whether an answer is supported by the documents, for every strategy (and "
             "eval's unsupported metric): package.module:name or file.py:name, a Verifier or a factory "
             "returning one, e.g. a CrossEncoderVerifier over your NLI model; or FILE.json, the checks "
             "selfrag eval --fit-verifier wrote, for the lexical one (default: the lexical one)",
    )  # fmt: skip
    llm_opts.add_argument(
        "--max-llm-calls", type=int, default=12, help="LLM-call budget per question (default 12)"
    )
    return llm_opts


def _timing_options() -> argparse.ArgumentParser:
    """The seconds an LLM call and a question may take."""
    timing = argparse.ArgumentParser(add_help=False)  # `serve` has its own --timeout (per request)
    timing.add_argument(
        "--llm-timeout", type=float, default=DEFAULT_LLM_TIMEOUT, metavar="SECONDS",
        help=f"seconds one LLM call may take (default {DEFAULT_LLM_TIMEOUT:g}; 0 for no limit)",
    )  # fmt: skip
    timing.add_argument(
        "--timeout", type=float, default=DEFAULT_QUERY_TIMEOUT, metavar="SECONDS",
        help=f"seconds one question may take (default {DEFAULT_QUERY_TIMEOUT:g}; 0 for no limit)",
    )  # fmt: skip
    return timing


def _routing_options() -> argparse.ArgumentParser:
    """The adaptive strategy's router and call budget."""
    routing = argparse.ArgumentParser(add_help=False)
    routing.add_argument(
        "--router", metavar="FILE",
        help=f"for {ADAPTIVE}: the router `selfrag eval --fit-router FILE` fitted on your questions "
             "(default: the rules: decompose a multi-part question, escalate an unsupported or "
             "incomplete answer)",
    )  # fmt: skip
    routing.add_argument(
        "--call-budget", type=float, metavar="CALLS",
        help=f"for {ADAPTIVE}: the most LLM calls a question is expected to cost (>= 1); it escalates only "
             "within it, and --max-llm-calls is capped at its ceiling",
    )  # fmt: skip
    return routing


def _new_index_options() -> argparse.ArgumentParser:
    """The embedder and the chunk size of a new index."""
    new_index = argparse.ArgumentParser(add_help=False)
    new_index.add_argument(
        "--embedder", choices=EMBEDDERS, default="auto",
        help="for a new index: auto (MiniLM when installed, else lexical), minilm, hashing, none",
    )  # fmt: skip
    new_index.add_argument("--chunk-size", type=int, default=600, help="characters per chunk of a new index")
    return new_index


def _index_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag index PATH...`"""
    p = sub.add_parser(
        "index", parents=[parents.common, parents.backend, parents.new_index],
        help="index files and folders (into --index DIR, or --backend chroma://... or a factory's object)",
    )  # fmt: skip
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--encoding", help="encoding of files that are not UTF-8 (e.g. cp1252)")
    p.add_argument(
        "--keep-removed", action="store_true",
        help="keep the chunks of files gone from the folders indexed (default: they leave the index)",
    )  # fmt: skip
    p.add_argument(
        "--ray", nargs="?", const="local", metavar="ADDRESS",
        help="read, chunk and embed on Ray (a Ray Data pipeline): a local cluster, or the one at ADDRESS; "
             "this process writes the index (pip install 'selfrag[ray]')",
    )  # fmt: skip
    p.add_argument(
        "--ray-workers", type=int, metavar="N", help="with --ray: the embedder actors (default: the CPUs)"
    )
    p.set_defaults(func=cmd_index)


def _delete_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag delete SOURCE...`"""
    p = sub.add_parser(
        "delete", parents=[parents.common, parents.backend],
        help="remove indexed files or other sources from the index",
        description="Remove every chunk of each SOURCE: a file as `selfrag index` indexed it (its path; "
                    "a relative one is made absolute), or any other source name (e.g. one sent to "
                    "POST /documents). Exit 1 when one of them was not indexed.",
    )  # fmt: skip
    p.add_argument("sources", nargs="+", metavar="SOURCE")
    p.set_defaults(func=cmd_delete)


def _ask_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag ask QUESTION`"""
    p = sub.add_parser(
        "ask",
        parents=[parents.common, parents.backend, parents.llm, parents.timing, parents.routing],
        help="answer a question from the index",
    )
    p.add_argument("question")
    p.add_argument(
        "--strategy", default=DEFAULT_STRATEGY, metavar="NAME", help=strategy_help(),
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument(
        "--filter", action="append", default=[], dest="filters", metavar="KEY=VALUE",
        help="retrieve only chunks whose metadata KEY equals VALUE (repeatable: all must hold), as the "
             "HTTP service's metadata_filter; a file indexed here has title (its name) and source (its "
             "path; a relative one is made absolute); VALUE is a number or true/false when it reads as "
             "one, quote it (KEY='\"572\"') for the text",
    )  # fmt: skip
    p.add_argument(
        "-q", "--quiet", action="store_true",
        help="no step lines on stderr (each retrieval, sub-question, verdict, attempt and fallback as it "
             "happens)",
    )  # fmt: skip
    p.set_defaults(func=cmd_ask)


def _demo_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag demo`"""
    p = sub.add_parser(
        "demo",
        parents=[parents.common, parents.llm, parents.timing, parents.new_index],
        help="index a sample corpus and run all strategies",
        description="Index the sample corpus shipped with the package and run the strategies on it. "
        "The demo keeps its own index (default: the user data dir's selfrag/demo-index, not "
        "$SELFRAG_INDEX), so it never mixes with yours; --index DIR puts it elsewhere.",
    )
    p.add_argument(
        "--questions", type=int, default=2, help="sample questions to run: 2 English (default), 3 adds Arabic"
    )
    p.add_argument(
        "--strategies", nargs="+", choices=STRATEGIES, help="strategies to run (default: all four)"
    )
    p.set_defaults(func=cmd_demo)


def _eval_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag eval QUESTIONS`: the run, then the router's fit, the dry run, Ray, the cache and the gate."""
    p = sub.add_parser(
        "eval", parents=[parents.common, parents.backend, parents.llm, parents.timing, parents.routing],
        help="compare the strategies with a plain retrieve-and-answer on your questions",
    )  # fmt: skip
    p.add_argument("questions", help="questions: a .jsonl file, a BEIR folder or a SQuAD .json file")
    p.add_argument(
        "--corpus",
        help="documents to index for the run: a BEIR corpus.jsonl (default: the data's own, else --index)",
    )
    contenders = ",".join((BASELINE, *STRATEGIES))
    p.add_argument(
        "--strategies",
        default=contenders,
        metavar="NAMES",
        help=f"comma-separated contenders; {BASELINE} is the baseline (default: {contenders})",
    )
    p.add_argument("--k", type=int, default=10, help="documents counted by recall@k and MRR (default 10)")
    p.add_argument(
        "--limit", type=int, help="evaluate a seeded random sample of N questions (with --offset: the next N)"
    )
    p.add_argument(
        "--offset", type=int, metavar="N",
        help="take the questions in file order from the N-th on (0-based; with --limit L: N .. N+L-1) "
             "instead of a random sample: e.g. fit a router on some questions, report on others",
    )  # fmt: skip
    _eval_router_options(p)
    p.add_argument(
        "--dry-run", action="store_true",
        help="print each contender's expected LLM calls and input tokens for the questions, then stop: "
             "no LLM call is made (retrievals run)",
    )  # fmt: skip
    _eval_run_options(p)
    p.add_argument(
        "--out", metavar="DIR", help="results.jsonl, summary.json, report.html (default eval-results/NAME)"
    )
    p.add_argument(
        "--cache",
        metavar="FILE",
        help="SQLite file of recorded LLM calls (default ~/.cache/selfrag/llm-calls.sqlite)",
    )
    p.add_argument("--no-cache", action="store_true", help="call the LLM every time, record nothing")
    p.add_argument(
        "--replay", action="store_true", help="answer only from the cache: a miss is an error (for CI)"
    )
    p.add_argument(
        "--baseline",
        metavar="RUN",
        help="an earlier run (its --out folder, summary.json or results.jsonl) to compare with question by "
        "question; exit 1 when a metric is significantly worse (its whole 95%% interval below zero), 2 when "
        "the gate cannot judge (a baseline unreadable, empty or sharing under half the run's questions)",
    )
    p.add_argument(
        "--shared-replies",
        action="store_true",
        help="one reply a prompt for every contender, as a deterministic model gives: a difference is "
        "the strategy's, not the model's run-to-run noise; reuses the baseline's recordings, then each "
        "contender's; latency then counts only each contender's own model calls",
    )
    p.add_argument(
        "--judge", action="store_true", help="also score faithfulness with the LLM (one more call per answer)"
    )
    p.add_argument(
        "--retrieval-only",
        action="store_true",
        help="rank documents instead of answering (plain and hyde); the default for data without answers",
    )
    p.add_argument(
        "--embedder", choices=EMBEDDERS, default="auto", help="embedder of the corpus index (default auto)"
    )
    p.set_defaults(func=cmd_eval)  # fmt: skip


def _eval_router_options(p: argparse.ArgumentParser) -> None:
    """`selfrag eval --fit-router FILE`, `--fit-verifier FILE` and their options."""
    p.add_argument(
        "--fit-router", metavar="FILE",
        help=f"after the run, fit {ADAPTIVE}'s router on the contenders' per-question results (a held-out "
             "share reports its own row against plain and the best single strategy) and write it to FILE",
    )  # fmt: skip
    p.add_argument(
        "--fit-verifier", metavar="FILE",
        help="after the run, refit the support check on its answers (label: the gold answer is in the "
             "answer), print the shipped and the refit check's held-out AUROC and balanced accuracy, and "
             "write the checks to FILE (use them with --verifier FILE)",
    )  # fmt: skip
    p.add_argument(
        "--holdout", type=float, default=0.3, metavar="SHARE",
        help="with --fit-router or --fit-verifier: the share of the questions held out from the fit "
             "(default 0.3)",
    )  # fmt: skip
    p.add_argument(
        "--fit-metric", metavar="NAME", help="with --fit-router: the metric to route for (default f1)"
    )
    p.add_argument(
        "--min-gain-per-call", type=float, metavar="GAIN",
        help="with --fit-router: the gain in the metric an extra LLM call must buy (higher: fewer calls; "
             "default: the threshold that replays best on the fitting questions)",
    )  # fmt: skip


def _eval_run_options(p: argparse.ArgumentParser) -> None:
    """How `selfrag eval` runs: the seed, the questions at once, and Ray."""
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of the bootstrap (default 0)")
    p.add_argument("--concurrency", type=int, default=2, help="questions answered at once (default 2)")
    p.add_argument(
        "--ray", nargs="?", const="local", metavar="ADDRESS",
        help="answer the questions on Ray actors: a local cluster, or the one at ADDRESS (auto, "
             "ray://HOST:10001); each actor builds the contenders once; this process writes the results "
             "and the cache (pip install 'selfrag[ray]')",
    )  # fmt: skip
    p.add_argument(
        "--ray-workers", type=int, metavar="N",
        help="with --ray: the actors (default: the cluster's CPUs over --threads, one CPU each by default)",
    )  # fmt: skip


def _stats_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag stats`"""
    p = sub.add_parser("stats", parents=[parents.common], help="describe the index")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)


def _serve_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag serve`: its options are the server's (``serve.server.add_arguments``)."""
    from selfrag_core.serve.server import add_arguments as add_serve_arguments  # imports no FastAPI

    p = sub.add_parser(
        "serve", parents=[parents.common, parents.backend, parents.llm, parents.routing, parents.new_index],
        help="serve the strategies over HTTP (pip install 'selfrag[serve]')",
    )  # fmt: skip
    add_serve_arguments(p, shared=False)
    p.set_defaults(func=cmd_serve)


def _mcp_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: _Parents) -> None:
    """`selfrag mcp`"""
    p = sub.add_parser(
        "mcp",
        parents=[
            parents.common, parents.backend, parents.llm, parents.timing, parents.routing, parents.new_index
        ],
        help="serve ask, search and add_documents as MCP tools over stdio (pip install 'selfrag[mcp]')",
        description="A Model Context Protocol server: the tools ask, search and add_documents, and "
        "each indexed source as a resource. Over stdio by default (an MCP client starts it); --http "
        "serves streamable HTTP at http://HOST:PORT/mcp, behind $SELFRAG_API_TOKEN as selfrag serve.",
    )  # fmt: skip
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument(
        "--host", default="127.0.0.1", help="with --http: address to listen on (default 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=8000, help="with --http: port (default 8000)")
    p.set_defaults(func=cmd_mcp)

"""``selfrag``: index documents and ask questions offline, on the embedded backend and
a local LLM.

    selfrag index PATH...                 # files and folders (text files, recursively); files gone
                                          # from a folder leave the index (--keep-removed keeps them),
                                          # emptied files too
    selfrag delete SOURCE...              # the chunks of indexed files (paths) or other sources
    selfrag ask "question" --strategy self|hyde|recursive|healing|adaptive|drafts|plain [--json]
    selfrag demo                          # sample corpus + the four self-improving strategies
    selfrag stats [--json]
    selfrag eval questions.jsonl --corpus corpus.jsonl   # each strategy against a plain retrieve-and-answer
    selfrag mcp [--http]                  # the tools ask, search, add_documents for MCP clients

The index lives in ``--index DIR``, else ``$SELFRAG_INDEX``, else the per-user data
directory (``$XDG_DATA_HOME/selfrag/index``, by default ``~/.local/share/selfrag/index``).
``--backend SPEC`` (index, ask, eval, serve) wins over it: an index directory, a Chroma
server (``chroma://HOST:PORT/COLLECTION``) or a backend of your own (``module:factory``,
``file.py:factory``); see ``presets.open_backend``.
Results go to stdout; progress, warnings and errors to stderr. Exit codes: 0 done,
1 done with skipped input (or nothing to index), 2 nothing done (bad input or setup),
130 interrupted. An index is only ever replaced atomically, so a failure never loses
what was already indexed.

Modules, each importing only ones below it (``main`` is here):

- ``parser``: the arguments and their help
- ``evaluate``: ``selfrag eval``
- ``commands``: the other commands, and the LLM and strategies they build
- ``output``: a result in words, a query's steps as they happen
- ``files``: the files to index, the index directory or backend and its writes; ``CLIError``
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from selfrag_core.cli.commands import _generation_options
from selfrag_core.cli.files import CLIError
from selfrag_core.cli.parser import build_parser
from selfrag_core.errors import RAGSystemError


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setLevel(logging.INFO if args.verbose else logging.WARNING)  # bm25s sets its logger to DEBUG
    logging.basicConfig(level=handler.level, format="%(levelname)s: %(message)s", handlers=[handler])
    try:
        _generation_options(args)  # a bad --llm-max-tokens / --llm-temperature fails before any work
        code: int = args.func(args)
    except (CLIError, RAGSystemError, ValueError) as e:  # typed library errors carry their fix
        print(f"selfrag: error: {e}", file=sys.stderr)
        return e.code if isinstance(e, CLIError) else 2
    except OSError as e:
        print(f"selfrag: error: {e.filename or ''} {e.strerror or e}; check the path and its permissions",
              file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        print("selfrag: interrupted; the index is unchanged unless a save had completed", file=sys.stderr)
        return 130
    return code

"""The house's figures: how big `selfrag_core` is, and which functions are too long or too knotted.

    python scripts/house.py            # the figures
    python scripts/house.py --check    # the same, and exit 1 when a function is over a limit

It reads the source with the standard library's `ast` (nothing is imported or installed) and
prints:

- the shipped non-blank lines of `selfrag_core` (its `.py` files), in all and per top-level
  entry (a module, or a package with everything under it);
- the number of top-level entries in `selfrag_core/` (files and folders, `__pycache__` aside);
- the functions longer than `MAX_LINES` lines: from the `def` line to the last line of the
  body, comments and blank lines included, the docstring aside (documenting a function never
  makes it too long); a nested function counts in its parent too;
- the functions whose cyclomatic complexity is above `MAX_COMPLEXITY`;
- the deferred imports of `selfrag_core`'s own modules: an import inside a function.

Cyclomatic complexity is McCabe's count of a function's decision points, plus one: each
`if` and `elif`, conditional expression (`a if c else b`), `for` and `while` loop, `except`
handler, `case` of a `match`, `for` and `if` clause of a comprehension, and each operand of
`and` / `or` beyond the first adds one. `else` branches, `with`, `assert` and `return` add
nothing. A nested function or class is a function of its own: its decisions are not its
parent's (a lambda's are).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "selfrag_core"
MAX_LINES = 80
MAX_COMPLEXITY = 20
ROOT = Path(__file__).resolve().parent.parent

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
# one decision point each
_BRANCHES = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.match_case)
# their bodies are counted on their own
_OWN_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Function:
    """One function or method: where it is, how long and how knotted."""

    path: str
    line: int
    name: str
    lines: int
    complexity: int

    def where(self) -> str:
        """`path:line name`, the way the report names it."""
        return f"{self.path}:{self.line} {self.name}"


@dataclass(frozen=True)
class DeferredImport:
    """An import of one of the package's own modules inside a function."""

    path: str
    line: int
    function: str
    module: str


def complexity(function: _FunctionNode) -> int:
    """McCabe's cyclomatic complexity of `function` (the module docstring says what counts)."""
    count = 1
    pending: list[ast.AST] = list(ast.iter_child_nodes(function))
    while pending:
        node = pending.pop()
        if isinstance(node, _OWN_SCOPES):
            continue
        if isinstance(node, _BRANCHES):
            count += 1
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
        pending.extend(ast.iter_child_nodes(node))
    return count


def length(function: _FunctionNode) -> int:
    """The lines of `function` from its `def` to its end, its docstring's aside."""
    lines = (function.end_lineno or function.lineno) - function.lineno + 1
    first = function.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, _FunctionNode]]:
    """Every function under `tree` with its qualified name (`Class.method`, `outer.inner`)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, _FunctionNode):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.")
        else:
            yield from _functions(node, prefix)


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement names; a relative one keeps its leading dots."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return ["." * node.level + (node.module or "")]


def _own_module(module: str) -> bool:
    """Whether `module` is one of the package's own (a relative import always is)."""
    return module.startswith(".") or module == PACKAGE or module.startswith(f"{PACKAGE}.")


def _deferred_imports(path: str, name: str, function: _FunctionNode) -> Iterator[DeferredImport]:
    """The imports of the package's own modules directly in `function` (nested ones aside)."""
    pending: list[ast.AST] = list(ast.iter_child_nodes(function))
    while pending:
        node = pending.pop()
        if isinstance(node, _FunctionNode):
            continue  # reported under its own name
        if isinstance(node, ast.Import | ast.ImportFrom):
            for module in _imported_modules(node):
                if _own_module(module):
                    yield DeferredImport(path, node.lineno, name, module)
        pending.extend(ast.iter_child_nodes(node))


@dataclass
class House:
    """The figures of one package: lines per top-level entry, functions, deferred imports."""

    entries: dict[str, int]
    functions: list[Function]
    deferred: list[DeferredImport]

    def too_long(self) -> list[Function]:
        """The functions longer than `MAX_LINES`, longest first."""
        return sorted((f for f in self.functions if f.lines > MAX_LINES), key=lambda f: -f.lines)

    def too_complex(self) -> list[Function]:
        """The functions with a complexity above `MAX_COMPLEXITY`, most complex first."""
        over = (f for f in self.functions if f.complexity > MAX_COMPLEXITY)
        return sorted(over, key=lambda f: -f.complexity)


def survey(package: Path) -> House:
    """Read every `.py` file of `package` and gather its figures."""
    entries = {entry.name: 0 for entry in sorted(package.iterdir()) if entry.name != "__pycache__"}
    functions: list[Function] = []
    deferred: list[DeferredImport] = []
    for file in sorted(package.rglob("*.py")):
        if "__pycache__" in file.parts:
            continue
        source = file.read_text(encoding="utf-8")
        path = file.relative_to(package.parent).as_posix()
        entries[file.relative_to(package).parts[0]] += sum(1 for line in source.splitlines() if line.strip())
        for name, node in _functions(ast.parse(source, filename=path)):
            functions.append(Function(path, node.lineno, name, length(node), complexity(node)))
            deferred.extend(sorted(_deferred_imports(path, name, node), key=lambda d: d.line))
    return House(entries, functions, deferred)


def report(house: House) -> str:
    """The figures as text, one section per figure."""
    out = [f"shipped non-blank lines of {PACKAGE}: {sum(house.entries.values())}"]
    out += [f"  {lines:6d}  {name}" for name, lines in house.entries.items()]
    out.append(f"top-level entries in {PACKAGE}/: {len(house.entries)}")
    too_long, too_complex = house.too_long(), house.too_complex()
    out.append(f"functions longer than {MAX_LINES} lines: {len(too_long)}")
    out += [f"  {f.lines:4d} lines  {f.where()}" for f in too_long]
    out.append(f"functions with cyclomatic complexity above {MAX_COMPLEXITY}: {len(too_complex)}")
    out += [f"  CC {f.complexity:3d}  {f.where()}" for f in too_complex]
    out.append(f"deferred imports of {PACKAGE} modules: {len(house.deferred)}")
    out += [f"  {d.path}:{d.line} {d.function} imports {d.module}" for d in house.deferred]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the figures; with `--check`, return 1 when a function is over a limit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help=f"fail over {MAX_LINES} lines or complexity {MAX_COMPLEXITY}"
    )
    parser.add_argument("--package", type=Path, default=ROOT / PACKAGE, help="the package folder to read")
    args = parser.parse_args(argv)
    house = survey(args.package)
    print(report(house))
    if args.check and (house.too_long() or house.too_complex()):
        print(f"over the limits: no function may pass {MAX_LINES} lines or complexity {MAX_COMPLEXITY}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

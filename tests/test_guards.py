"""Guards on the shape of the code (issue 23): the product's size rules and the tests' own
rules, each read from the source with :mod:`ast`, no process started.

- Product (``supervisor/``): no module over 500 lines, no function over 80 lines, no
  ``# fmt: skip`` (the size guide is met by structure, not by packing lines), and no
  circle of module-level imports.
- Tests: no test module imports another (shared helpers live in ``tests/support/``), and no
  test asserts an upper bound on wall-clock time (a loaded machine can miss any such bound;
  the figures belong in ``benchmarks/``; a test may assert order, or a lower bound).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = REPO / "supervisor"
TESTS = REPO / "tests"

MAX_MODULE_LINES = 500
"""Lines of one module of ``supervisor/`` (issue 23, item 5; the design card's size guide)."""
MAX_FUNCTION_LINES = 80
"""Lines of one function or method of ``supervisor/``, decorators included."""

CLOCKS = {"time", "monotonic", "perf_counter", "monotonic_ns", "time_ns", "perf_counter_ns"}
"""Functions of :mod:`time` that read a wall clock (``time.X()``)."""


def product_modules() -> list[Path]:
    """Every ``.py`` file under ``supervisor/``, sorted."""
    return sorted(PRODUCT.rglob("*.py"))


def modules_of_tests() -> list[Path]:
    """Every test module: ``tests/test_*.py``, sorted."""
    return sorted(TESTS.glob("test_*.py"))


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# ---------------------------------------------------------------- the product's rules


def test_no_product_module_is_over_500_lines() -> None:
    """Each module of ``supervisor/`` has at most 500 lines."""
    over = {}
    for path in product_modules():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > MAX_MODULE_LINES:
            over[_rel(path)] = count
    assert over == {}, over


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_no_product_function_is_over_80_lines() -> None:
    """Each function of ``supervisor/`` (decorators to last line) has at most 80 lines."""
    over = {}
    for path in product_modules():
        for node in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            count = (node.end_lineno or node.lineno) - first + 1
            if count > MAX_FUNCTION_LINES:
                over[f"{_rel(path)}:{node.lineno} {node.name}"] = count
    assert over == {}, over


def test_no_fmt_skip_in_the_product() -> None:
    """``# fmt: skip`` packed lines to meet the size guide; ``supervisor/`` has none."""
    found = [
        f"{_rel(path)}:{number}"
        for path in product_modules()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert found == [], found


# ---------------------------------------------------------------- the tests' rules


def _imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            if node.module in ("tests", "support"):  # from tests import test_x
                for alias in node.names:
                    yield node.lineno, f"{node.module}.{alias.name}"


def _is_test_module(name: str) -> bool:
    last = name.split(".")[-1]
    return last.startswith("test_") or (name.startswith("tests.") and last != "conftest")


def test_no_test_module_imports_another() -> None:
    """A test module imports helpers from ``tests/support/`` (or ``conftest``), never from
    another ``test_*.py`` module."""
    found = [
        f"{_rel(path)}:{line} imports {name}"
        for path in modules_of_tests() + sorted((TESTS / "support").glob("*.py"))
        for line, name in _imported_modules(ast.parse(path.read_text(encoding="utf-8")))
        if _is_test_module(name) and not name.startswith("tests.support")
    ]
    assert found == [], found


#: Readings of when something happened, besides the clock: a file's times and an event's
#: parsed ``ts`` (``ts(...)``, ``datetime.fromisoformat(...)``).
STAMP_ATTRS = {"st_mtime", "st_mtime_ns", "st_ctime", "st_atime"}
STAMP_CALLS = {"ts", "fromisoformat"}


def _is_clock_call(node: ast.AST) -> bool:
    """``time.monotonic()``, ``time.time()``, ``monotonic()``, a file's ``st_mtime``, an
    event's ``ts(...)``..."""
    if isinstance(node, ast.Attribute) and node.attr in STAMP_ATTRS:
        return True
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute | ast.Name) and _name_of(func) in STAMP_CALLS:
        return True
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id == "time" and func.attr in CLOCKS
    return isinstance(func, ast.Name) and func.id in CLOCKS - {"time"}


def _name_of(func: ast.Attribute | ast.Name) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id


class _Clocks:
    """The names of one function bound to clock readings, elapsed times and deadlines."""

    def __init__(self, function: ast.AST) -> None:
        self.readings: set[str] = set()
        self.elapsed: set[str] = set()
        self.deadlines: set[str] = set()
        for _ in range(3):  # names built from names: a fixed point in a few passes
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Name):
                        self._bind(target.id, node.value)

    def _bind(self, name: str, value: ast.AST) -> None:
        if self.is_elapsed(value):
            self.elapsed.add(name)
        elif self.is_deadline(value):
            self.deadlines.add(name)
        elif self.is_reading(value):
            self.readings.add(name)

    def is_reading(self, node: ast.AST) -> bool:
        return _is_clock_call(node) or (isinstance(node, ast.Name) and node.id in self.readings)

    def is_elapsed(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.elapsed
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
            # a reading less a reading (``started - 1`` is an earlier time, no elapsed one)
            return self.is_reading(node.left) and not isinstance(node.right, ast.Constant)
        return False

    def is_deadline(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.deadlines
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.is_reading(node.left) or self.is_reading(node.right)
        return False

    def bounds_above(self, low: ast.AST, high: ast.AST) -> bool:
        """``low < high`` bounds a wall-clock time from above: an elapsed time below a
        figure, or a clock reading before a deadline."""
        return self.is_elapsed(low) or (self.is_reading(low) and self.is_deadline(high))


def wall_clock_bounds(tree: ast.AST) -> Iterator[int]:
    """Line numbers of the ``assert`` statements that bound a wall-clock time from above."""
    for function in _functions(tree):
        clocks = _Clocks(function)
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert):
                continue
            # each comparison of the assert, those joined by ``and``/``or`` too
            tests = [n for n in ast.walk(node.test) if isinstance(n, ast.Compare)]
            if any(_bounds_above(clocks, test) for test in tests):
                yield node.lineno


def _bounds_above(clocks: _Clocks, test: ast.Compare) -> bool:
    """Whether one comparison bounds a wall-clock time from above."""
    sides = [test.left, *test.comparators]
    for index, op in enumerate(test.ops):
        low, high = sides[index], sides[index + 1]
        if isinstance(op, ast.Gt | ast.GtE):
            low, high = high, low
        elif not isinstance(op, ast.Lt | ast.LtE):
            continue
        if clocks.bounds_above(low, high):
            return True
    return False


def test_no_test_asserts_a_wall_clock_bound() -> None:
    """No ``assert time.monotonic() - started < 20``, no ``took = ...; assert took < 10``,
    no ``assert time.monotonic() < deadline``: a loaded 2-core machine missed such bounds.
    Order (``began < ended``) and lower bounds (``>= 1.5`` s waited) stay allowed."""
    found = [
        f"{_rel(path)}:{line}"
        for path in modules_of_tests()
        for line in sorted(set(wall_clock_bounds(ast.parse(path.read_text(encoding="utf-8")))))
    ]
    assert found == [], found


def test_the_wall_clock_guard_sees_the_patterns() -> None:
    """The guard's own check: each bad pattern is found, each allowed one is not."""
    bad = [
        "def t():\n    started = time.monotonic()\n    assert time.monotonic() - started < 20\n",
        "def t():\n    t0 = time.time()\n    took = time.time() - t0\n    assert took < 10\n",
        "def t():\n    end = time.monotonic() + 5\n    assert time.monotonic() < end\n",
        "def t():\n    began = monotonic()\n    assert 10 > monotonic() - began\n",
        "def t():\n    began = time.monotonic()\n    assert ok and time.monotonic() - began < 1\n",
        "def t():\n    done = a.stat().st_mtime\n    assert b.stat().st_mtime - done < 0.25\n",
        "def t():\n    assert ts(b['ts']) - ts(a['ts']) < 4\n",
    ]
    good = [
        "def t():\n    began = time.time()\n    ended = time.time()\n    assert began < ended\n",
        "def t():\n    stopped = time.monotonic()\n    assert time.monotonic() - stopped >= 1.5\n",
        "def t():\n    assert spool.pending(now=time.time() + 60)\n",
        "def t():\n    began = time.time()\n    assert ok and began - 1 <= stamp\n",
        "def t():\n    done = a.stat().st_mtime\n    assert done <= b.stat().st_mtime < ts(c)\n",
        "def t():\n    assert ts(b['ts']) - ts(a['ts']) >= 2\n",
    ]
    assert [len(list(wall_clock_bounds(ast.parse(code)))) for code in bad] == [1] * len(bad)
    assert [len(list(wall_clock_bounds(ast.parse(code)))) for code in good] == [0] * len(good)


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """The ``supervisor`` modules ``path`` imports when it is loaded: its module-level
    imports, not those under ``if TYPE_CHECKING:`` or inside a function (a lazy import)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known}


def import_circles() -> list[list[str]]:
    """Circles among the modules of ``supervisor/`` through module-level imports: each
    strongly connected set of more than one module (Tarjan's algorithm), sorted."""
    paths = {_module_name(p): p for p in product_modules()}
    graph = {name: _top_level_imports(path, set(paths)) for name, path in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in graph[name]:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            members = stack[stack.index(name) :]
            del stack[stack.index(name) :]
            if len(members) > 1:
                circles.append(sorted(members))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(circles)


def test_no_import_circle_among_product_modules() -> None:
    """No two modules of ``supervisor/`` import each other, directly or around a circle,
    when loaded (issue 23: the CLI's 10-file circle and engine ↔ cluster are gone; a lazy
    import inside a function is outside this rule)."""
    assert import_circles() == []

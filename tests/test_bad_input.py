"""Hostile spool input: whatever is dropped into the spool, ``spool.claim`` never raises,
never loses the file and never writes outside the spool and state folders.

Property-based (hypothesis) over task files with random and misspelt keys, wrong types,
huge prompts, binary and non-UTF-8 bytes, NUL bytes, malformed TOML, path-traversal and
unicode names, project folders and prompt files in and out of reach, and weird spool file
names. Every example runs in a fresh folder and checks one outcome, exactly:

* claimed: ``state/tasks/<id>/`` with ``id`` a tmux- and path-safe slug, ``task.toml`` the
  dropped bytes, ``prompt`` the prompt bytes, ``manifest.json`` valid JSON saying
  ``queued``; or
* rejected: ``spool/rejected/<name>`` the dropped bytes and a non-empty ``<name>.error``
  that names the file (and no task folder left behind).

Both outcomes are accepted where validity depends on the profile (``[security]
task_may_set``: by default ``env`` and ``monitor.notifier*`` are refused) or is not worth
predicting; the outcome is pinned where it is certain (an undamaged task is claimed, bytes
that are not UTF-8 TOML are rejected).

Inputs that once crashed ``claim`` are pinned by regression tests at the end; a newly found
crash can be kept out of the generators with :func:`known_bug` while it is being fixed.

Run with ``-s`` to see how many inputs were tried.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from supervisor import spool
from supervisor.config import LoadedProfile, MonitorPolicy, load_profile
from supervisor.taskdir.folder import TaskDir

SAFE_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
#: Outcomes per property and in total; printed at the end of each property test.
STATS: Counter[str] = Counter()

REAL_KEYS = ("name", "prompt", "prompt_file", "project_dir", "model", "env", "monitor")
#: Every [monitor] key, from its one declaration.
MONITOR_KEYS = tuple(MonitorPolicy.model_fields)
HOSTILE = (
    "../../x",
    "../../../../../../tmp/x",
    "/etc/passwd",
    "/tmp/x",
    "-rf",
    "--help",
    "-",
    "--",
    "a/b",
    "..",
    ".",
    ":",
    "a:b.c",
    "sess:0.1",
    " ",
    "  leading",
    "trailing  ",
    "with spaces in it",
    "😀",
    "🚀 launch 🚀",
    "名前",
    "Ünïcödé",
    "\x00",
    "a\x00b",
    "\n",
    "line1\nline2\r\n",
    "\t",
    "\x1b[31mred\x1b[0m",
    "$(touch /tmp/x)",
    "`touch /tmp/x`",
    "; rm -rf ~",
    "%s%n%x",
    "{prompt}",
    "{session_id}",
    "'\"",
    "\\",
    "\u202eevil",
    "\ufeffbom",
    "ＡＢＣ",
    "x" * 300,
    "",
)
#: Spool file stems (``.toml`` is appended) that a filesystem allows but a careless
#: program might not.
HOSTILE_STEMS = (
    "-rf",
    "--help",
    "-",
    "--",
    " ",
    "a b c",
    " lead",
    "trail ",
    "😀",
    "名前 タスク",
    "rejected",
    "task",
    "tasks",
    "manifest.json",
    "x:y",
    "a.b.c",
    "abc-123456",
    "ABC-123456",
    "*",
    "?",
    "\\",
    "\n",
    "\t",
    "~",
    "$HOME",
    "-" * 50,
    "é" * 90,
    "\u202eevil",
    "..x",
)


# ---------------------------------------------------------------------- the world


@dataclass(frozen=True)
class Ref:
    """A path known only once the example's folder exists (see :meth:`World.path`)."""

    kind: str


PROJECT_REFS = ("project", "project_rel", "outside_dir", "root", "spool", "file", "missing")
PROMPT_FILE_REFS = ("text", "text_rel", "empty", "crlf", "binary", "missing", "dir", "spool")


@dataclass
class World:
    """One example's folder: ``profile.toml``, ``project/``, ``outside/`` (files a task
    may point at), ``spool/`` and ``state/``."""

    root: Path
    profile: LoadedProfile

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def tasks(self) -> Path:
        return self.state / "tasks"

    def path(self, kind: str) -> str:
        outside = self.root / "outside"
        return {
            "project": str(self.root / "project"),
            "project_rel": "../project",  # relative to the spool folder
            "outside_dir": str(outside),
            "root": "/",
            "spool": str(self.spool),
            "file": str(outside / "secret.txt"),
            "missing": str(self.root / "no" / "such" / "folder"),
            "text": str(outside / "secret.txt"),
            "text_rel": "../outside/secret.txt",
            "empty": str(outside / "empty.txt"),
            "crlf": str(outside / "crlf.txt"),
            "binary": str(outside / "binary.bin"),
            "dir": str(outside),
        }[kind]


@contextlib.contextmanager
def world(base: Path, big_file: bytes | None = None) -> Iterator[World]:
    with tempfile.TemporaryDirectory(dir=base) as name:
        root = Path(name)
        (root / "project").mkdir()
        outside = root / "outside"
        outside.mkdir()
        (outside / "secret.txt").write_bytes(big_file or "secret ✓\n".encode())
        (outside / "empty.txt").write_bytes(b"")
        (outside / "crlf.txt").write_bytes(b"line 1\r\nline 2\r\n")
        (outside / "binary.bin").write_bytes(bytes(range(256)) * 4)
        (root / "spool").mkdir()
        profile = root / "profile.toml"
        profile.write_text(
            '[paths]\nspool_dir = "spool"\nstate_dir = "state"\n\n'
            '[agent]\ncommand = ["true"]\n\n[monitor]\nbase_interval = 1\n',
            encoding="utf-8",
        )
        yield World(root, load_profile(profile))


def resolve_refs(value: Any, w: World) -> Any:
    if isinstance(value, Ref):
        return w.path(value.kind)
    if isinstance(value, dict):
        return {k: resolve_refs(v, w) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, w) for v in value]
    return value


# ------------------------------------------------------------------ known bugs


def _has_nul(value: Any) -> bool:
    return isinstance(value, str) and "\x00" in value


def _too_long(value: Any) -> bool:
    """A path with a component longer than NAME_MAX (255 bytes)."""
    return isinstance(value, str) and any(len(part.encode()) > 255 for part in value.split("/"))


def known_bug(doc: Any) -> bool:
    """A task that makes ``claim`` raise: none is known now (kept as the hook for the next)."""
    return False


# ------------------------------------------------------------------ the check


def snapshot(root: Path, skip: set[str]) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``root`` (not following links), except the top-level ``skip``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        if not rel.parts:
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames + filenames:
            if not rel.parts and name in skip:
                continue
            info = (Path(dirpath) / name).lstat()
            out[str(rel / name)] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns)
    return out


def visible(folder: Path) -> list[str]:
    """Non-hidden entries (the repo's own tools may add ``.pytest_cache`` and the like)."""
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def names_file(text: str, filename: str) -> bool:
    return any(
        form in text for form in (filename, repr(filename)[1:-1], json.dumps(filename)[1:-1])
    )


def expected_prompt(data: bytes, w: World) -> bytes:
    doc = tomllib.loads(data.decode("utf-8"))
    if isinstance(doc.get("prompt"), str):
        return doc["prompt"].encode("utf-8")
    return (w.spool / Path(doc["prompt_file"]).expanduser()).read_bytes()


def check_claim(
    w: World,
    filename: str,
    data: bytes,
    expect: str | None = None,
    label: str = "",
) -> str:
    """Drop ``data`` as ``spool/<filename>``, claim it, check every invariant.

    Returns ``"claimed"`` or ``"rejected"``. ``expect`` pins the outcome when known.
    """
    path = w.spool / filename
    path.write_bytes(data)
    assert path in spool.pending(w.spool, now=time.time() + 60), "pending() must list it"
    preexisting_tasks = {p.name: snapshot(p, set()) for p in w.tasks.glob("*")}
    rejected_dir = w.spool / spool.REJECTED
    preexisting_rejected = {
        p.name: p.read_bytes() for p in (rejected_dir.iterdir() if rejected_dir.exists() else [])
    }
    outside_before = snapshot(w.root, {"spool", "state"})
    parent_before = sorted(os.listdir(w.root.parent))
    cwd_before = visible(Path.cwd())

    result = spool.claim(path, w.profile)  # 1. must not raise

    # 3. nothing written outside spool_dir and state_dir
    assert snapshot(w.root, {"spool", "state"}) == outside_before
    assert sorted(os.listdir(w.root.parent)) == parent_before
    assert visible(Path.cwd()) == cwd_before
    assert not path.exists(), "the file must leave the spool"
    assert result is not None, "nobody else claims in this test"
    # no earlier task or rejected file was touched
    for name, tree in preexisting_tasks.items():
        assert snapshot(w.tasks / name, set()) == tree
    for name, content in preexisting_rejected.items():
        assert (rejected_dir / name).read_bytes() == content
    assert sorted(os.listdir(w.state)) == ["tasks"]

    new_tasks = sorted(p for p in w.tasks.iterdir() if p.name not in preexisting_tasks)
    if result.task_dir is None:
        # 2. rejected: the bytes moved unchanged, with a reason naming the file
        assert result.error and result.rejected_to is not None
        moved = result.rejected_to
        assert moved.parent == rejected_dir
        if filename not in preexisting_rejected and len(os.fsencode(filename)) <= 200:
            assert moved.name == filename
        assert moved.name.endswith(".toml") and len(os.fsencode(moved.name)) <= 255 - 6
        assert moved.read_bytes() == data
        error = moved.with_name(moved.name + ".error")
        text = error.read_bytes().decode("utf-8")
        assert text.strip(), "empty .error"
        assert names_file(text, filename), f".error does not name {filename!r}: {text!r}"
        added = set(os.listdir(rejected_dir)) - set(preexisting_rejected)
        assert added == {moved.name, error.name}
        assert new_tasks == [], "a rejected file must not leave a task folder"
        assert os.listdir(w.spool) == [spool.REJECTED]
        outcome = "rejected"
    else:
        # 2. claimed: the bytes moved unchanged into a safe task folder
        task_dir = result.task_dir.path
        assert new_tasks == [task_dir]
        # 4. a tmux- and path-safe id directly under state/tasks
        assert task_dir.parent == w.tasks
        assert SAFE_ID.fullmatch(task_dir.name), task_dir.name
        assert len(task_dir.name) <= 47
        assert (task_dir / "task.toml").read_bytes() == data
        assert (task_dir / "prompt").read_bytes() == expected_prompt(data, w)
        # 5. the manifest is valid JSON and queued
        manifest = json.loads((task_dir / "manifest.json").read_bytes())
        assert manifest["status"] == "queued"
        assert manifest["task_id"] == manifest["session_name"] == task_dir.name
        lines = (task_dir / "events.jsonl").read_bytes().split(b"\n")  # JSON Lines: \n only
        events = [json.loads(line) for line in lines if line]
        assert [e["event"] for e in events] == ["queued"]
        assert not [p for p in os.listdir(task_dir) if p.endswith(".tmp")]
        assert set(os.listdir(w.spool)) <= {spool.REJECTED}
        outcome = "claimed"
    if expect is not None:
        assert outcome == expect, f"expected {expect}, got {outcome}: {result.error}"
    STATS[outcome] += 1
    STATS["total"] += 1
    if label:
        STATS[f"{label}:{outcome}"] += 1
        STATS[label] += 1
    if currently_in_test_context():
        event(outcome)
    return outcome


# ---------------------------------------------------------------------- strategies


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Pick a strategy by weight. Unlike ``one_of``, nested choices are not flattened into
    equal branches, so a many-branched ``wrong_type`` does not crowd out the rest."""
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


text_ = st.text(max_size=40)
hostile = st.sampled_from(HOSTILE)
wrong_type = weighted(
    (1, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    (1, st.booleans()),
    (1, st.floats()),
    (1, st.one_of(st.dates(), st.datetimes())),
    (1, st.lists(st.one_of(st.integers(), text_, st.booleans()), max_size=4)),
    (1, st.dictionaries(text_, st.one_of(st.integers(), text_), max_size=3)),
)


def typo_of(word: str) -> st.SearchStrategy[str]:
    n = len(word)
    return st.one_of(
        st.integers(0, n - 1).map(lambda i: word[:i] + word[i + 1 :]),
        st.integers(0, n - 1).map(lambda i: word[:i] + word[i] + word[i:]),
        st.integers(0, n - 2).map(lambda i: word[:i] + word[i + 1] + word[i] + word[i + 2 :]),
        st.sampled_from(
            [word.upper(), word.title(), word.replace("_", "-"), f" {word}", f"{word}s", f"{word}_"]
        ),
    )


def keys_like(real: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(real), st.sampled_from(real).flatmap(typo_of), text_, hostile)


any_value = weighted((1, text_), (1, hostile), (1, wrong_type))
names = weighted(
    (2, hostile), (2, text_), (1, st.text(min_size=150, max_size=250)), (1, wrong_type)
)
valid_names = st.one_of(
    hostile.filter(lambda s: 0 < len(s) <= 200), st.text(min_size=1, max_size=60)
)
valid_prompts = st.one_of(hostile, st.text(max_size=3000))
prompts = weighted((1, text_), (1, hostile), (1, st.text(max_size=2000)), (1, wrong_type))
project_dirs = weighted(
    (4, st.sampled_from(PROJECT_REFS).map(Ref)),
    (2, hostile),
    (1, text_),
    (1, st.sampled_from(["~", "~/", "~/no-such-zz", "~nosuchuser_zz/p", "~root", ".", "..", ""])),
    (1, wrong_type),
)
prompt_files = weighted(
    (4, st.sampled_from(PROMPT_FILE_REFS).map(Ref)),
    (2, hostile),
    (1, text_),
    (1, st.sampled_from(["~", "~/", "~nosuchuser_zz/p", "/dev/null", "/etc/hostname"])),
    (1, wrong_type),
)
models = weighted(
    (
        3,
        st.sampled_from(["opus", "sonnet", "claude-x-1", "haiku", "gpt", "-rf", "", "a b", "名前"]),
    ),
    (1, text_),
    (1, wrong_type),
)
monitor_values = weighted(
    (2, st.floats(min_value=-10, max_value=1e9)),
    (2, st.integers(min_value=-5, max_value=10**6)),
    (
        1,
        st.lists(
            st.one_of(text_, st.sampled_from(["{message}", "{bogus}", "completed"])), max_size=3
        ),
    ),
    (1, st.lists(st.integers(-5, 300), max_size=3)),
    (1, wrong_type),
)
monitor_tables = weighted(
    (4, st.dictionaries(keys_like(MONITOR_KEYS), monitor_values, max_size=4)), (1, wrong_type)
)
env_tables = weighted(
    (
        4,
        st.dictionaries(
            st.one_of(text_, st.sampled_from(["PATH", "LD_PRELOAD", "A=B", "", "HOME", "名前"])),
            weighted((3, text_), (1, wrong_type)),
            max_size=3,
        ),
    ),
    (1, wrong_type),
)


@st.composite
def task_docs(draw: st.DrawFn) -> tuple[dict[str, Any], str | None]:
    """A task table (with :class:`Ref` placeholders) and the outcome it must have, if sure.

    Starts from a valid task and applies random damage; the outcome is pinned only for an
    undamaged task (``claimed``).
    """
    likely = st.sampled_from([True, True, False])
    doc: dict[str, Any] = {"name": "ok"}
    clean = True
    if not draw(likely):
        doc["name"] = draw(names)
        clean = False
    elif not draw(likely):
        doc["name"] = draw(valid_names)  # still valid, but hostile as a slug / session name
    if draw(likely):
        doc["project_dir"] = Ref(draw(st.sampled_from(["project", "project_rel", "root"])))
    else:
        doc["project_dir"] = draw(project_dirs)
        clean = False
    if draw(st.booleans()):
        doc["prompt"] = draw(st.one_of(st.just("print: hi"), valid_prompts, prompts))
        clean = clean and isinstance(doc["prompt"], str)
    else:
        doc["prompt_file"] = draw(prompt_files)
        clean = clean and doc["prompt_file"] in (Ref("text"), Ref("text_rel"), Ref("crlf"))
    for key, strategy in (
        ("model", st.one_of(st.sampled_from(["opus", "sonnet", "claude-x-1"]), models)),
        ("monitor", monitor_tables),
        ("env", env_tables),
    ):
        if draw(st.integers(0, 3)) == 0:
            doc[key] = draw(strategy)
            clean = False
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        clean = False
        op = draw(st.sampled_from(["drop", "set", "add", "both", "nest"]))
        if op == "drop" and doc:
            doc.pop(draw(st.sampled_from(sorted(doc))))
        elif op == "set":
            doc[draw(st.sampled_from(REAL_KEYS))] = draw(any_value)
        elif op == "add":
            doc[draw(keys_like(REAL_KEYS))] = draw(any_value)
        elif op == "both":
            doc["prompt"], doc["prompt_file"] = "p", Ref("text")
        elif op == "nest":
            depth = draw(st.integers(1, 40))
            value: Any = draw(any_value)
            for _ in range(depth):
                value = draw(st.sampled_from([[value], {"k": value}]))
            doc[draw(keys_like(REAL_KEYS))] = value
    assume(not known_bug(doc))
    return doc, ("claimed" if clean else None)


def dump(doc: dict[str, Any], w: World) -> bytes:
    return tomli_w.dumps(resolve_refs(doc, w)).encode("utf-8")


MALFORMED = (
    b'name = "unterminated\n',
    b'name = """never closed\n',
    b"[monitor\n",
    b"[[monitor]]\nbase_interval = 1\n",
    b'= "no key"\n',
    b'name = "a"\nname = "b"\n',
    b"monitor.deadline = 5\nmonitor = 3\n",
    b'name = "a" trailing\n',
    b"name = 'a\nb'\n",
    b'name = "\\ud800"\n',
    b'name = "\\q"\n',
    b"\x00\x00\x00\x00",
    b"\xff\xfe" + "name = 'x'".encode("utf-16-le"),
    b"\xef\xbb\xbfname = 'x'\n",
    b"",
    b"   \n\n\t\n",
    b"# only a comment\n",
    b"x = " + b"[" * 60 + b"]" * 60 + b"\n",
    b"x = " + b"{a=" * 60 + b"1" + b"}" * 60 + b"\n",
    b"x = 1979-05-27T07:32:00Z\n",
    b"name = 1e400\n",
    b"name = 99999999999999999999999\n",
    b"name = nan\nprompt = inf\n",
    b"name = 0x\n",
    b"a" * 5000 + b" = 1\n",
    b"[" + b"a." * 200 + b"b]\nc = 1\n",
)


@st.composite
def raw_files(draw: st.DrawFn) -> Any:
    """Bytes that may be anything: returned as a function of the example's world."""
    kind = draw(st.sampled_from(["binary", "malformed", "corrupted", "text"]))
    if kind == "binary":
        blob = draw(st.binary(max_size=3000))
        return lambda w: blob
    if kind == "malformed":
        blob = draw(st.sampled_from(MALFORMED))
        return lambda w: blob
    if kind == "text":
        blob = draw(st.text(max_size=500)).encode("utf-8")
        return lambda w: blob
    doc, _ = draw(task_docs())
    # Corruption needs the final bytes, which depend on the world: draw its choices now.
    how = draw(st.sampled_from(["truncate", "insert", "nul", "bom", "crlf", "colon", "dup"]))
    frac = draw(st.floats(0, 1))
    junk = draw(st.binary(min_size=1, max_size=20))

    def build_fixed(w: World) -> bytes:
        data = dump(doc, w)
        at = int(len(data) * frac)
        return {
            "truncate": lambda: data[:at],
            "insert": lambda: data[:at] + junk + data[at:],
            "nul": lambda: data[:at] + b"\x00" + data[at:],
            "bom": lambda: b"\xef\xbb\xbf" + data,
            "crlf": lambda: data.replace(b"\n", b"\r\n"),
            "colon": lambda: data.replace(b" = ", b": ", 1),
            "dup": lambda: data + data,
        }[how]()

    return build_fixed


def parses(data: bytes) -> bool:
    try:
        tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return True


def _utf8_len_ok(name: str, limit: int = 200) -> bool:
    return len(name.encode("utf-8")) <= limit


stems = st.one_of(
    st.sampled_from(HOSTILE_STEMS),
    st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=60),
    st.from_regex(spool.TASK_ID_RE, fullmatch=True),
    st.text("-. :", min_size=1, max_size=10).map(lambda s: "-" + s),
).filter(lambda s: not s.startswith(".") and _utf8_len_ok(s + ".toml", 255))


# ---------------------------------------------------------------------- properties

COMMON = {
    "deadline": None,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ],
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("bad-input")
    print(f"\n[test_bad_input] inputs tried in total: {STATS['total']} ({dict(STATS)})")


def report(label: str) -> None:
    print(
        f"\n[test_bad_input] {label}: {STATS[label]} inputs tried "
        f"({STATS[f'{label}:claimed']} claimed, {STATS[f'{label}:rejected']} rejected)"
    )


@settings(max_examples=350, **COMMON)
@given(case=task_docs())
def test_random_task_tables(base: Path, case: tuple[dict[str, Any], str | None]) -> None:
    """Random keys, typos, wrong types, hostile names and paths, prompt vs prompt_file."""
    doc, expect = case
    with world(base) as w:
        check_claim(w, "task.toml", dump(doc, w), expect, label="tables")


@settings(max_examples=200, **COMMON)
@given(make=raw_files())
def test_raw_bytes(base: Path, make: Any) -> None:
    """Binary, NUL bytes, non-UTF-8, malformed and corrupted TOML: always rejected unless
    the bytes still happen to be a valid task."""
    with world(base) as w:
        data = make(w)
        expect = None if parses(data) else "rejected"
        check_claim(w, "raw.toml", data, expect, label="raw")


@settings(max_examples=25, **COMMON)
@given(
    unit=st.text(min_size=1, max_size=8),
    size=st.integers(100_000, 1_000_000),
    where=st.sampled_from(["prompt", "prompt_file", "name", "prompt+typo", "prompt_file+bin"]),
)
def test_huge_prompts(base: Path, unit: str, size: int, where: str) -> None:
    """Prompts (inline or as a file) and names up to ~1 MB."""
    text = (unit * (size // len(unit.encode("utf-8")) + 1))[:size]
    big = text.encode("utf-8")
    if where == "prompt_file+bin":
        big = big[:-1] + b"\xff"
    with world(base, big_file=big) as w:
        doc: dict[str, Any] = {"name": "huge", "project_dir": w.path("project")}
        expect: str | None = "claimed"
        if where.startswith("prompt_file"):
            doc["prompt_file"] = w.path("text")
            expect = "rejected" if where.endswith("bin") else "claimed"
        elif where == "name":
            doc["name"], doc["prompt"] = text, "hi"
            expect = "rejected"  # name is at most 200 characters
        else:
            doc["prompt"] = text
            if where.endswith("typo"):
                doc["promt"] = "x"
                expect = "rejected"
        check_claim(w, "huge.toml", tomli_w.dumps(doc).encode("utf-8"), expect, label="huge")


@settings(max_examples=150, **COMMON)
@given(
    stem=stems,
    valid=st.booleans(),
    name=st.one_of(st.just("plain"), hostile.filter(lambda s: 0 < len(s) <= 200)),
    taken=st.sampled_from(["", "task", "rejected"]),
)
def test_weird_file_names(base: Path, stem: str, valid: bool, name: str, taken: str) -> None:
    """Unicode, leading dash, spaces, task-id look-alikes, names already taken."""
    filename = stem + ".toml"
    with world(base) as w:
        doc: dict[str, Any] = {"name": name, "prompt": "hi"}
        if valid:
            doc["project_dir"] = w.path("project")
        if taken == "task" and spool.TASK_ID_RE.fullmatch(stem):
            (w.tasks / stem).mkdir(parents=True)
            (w.tasks / stem / "keep").write_text("earlier task")
        elif taken == "rejected":
            (w.spool / spool.REJECTED).mkdir()
            (w.spool / spool.REJECTED / filename).write_bytes(b"an earlier rejected file")
        w.tasks.mkdir(parents=True, exist_ok=True)
        data = tomli_w.dumps(doc).encode("utf-8")
        expect = "claimed" if valid else "rejected"
        check_claim(w, filename, data, expect, label="filenames")


def test_total_examples() -> None:
    """Runs after the properties: prints (and checks) how many inputs they tried."""
    labels = ("tables", "raw", "huge", "filenames")
    for label in labels:
        report(label)
    total = STATS["total"]
    print(f"[test_bad_input] inputs tried in the properties: {total}")
    if all(STATS[label] for label in labels):  # the whole file ran, not a -k selection
        assert total >= 500
        for label in ("tables", "filenames"):
            assert STATS[f"{label}:claimed"] and STATS[f"{label}:rejected"], label


# ------------------------------------------------------------------ former bugs


#: Inputs that crashed ``claim`` when this file was written (a NUL or an over-long part in a
#: relative path, a 3000-deep array, non-UTF-8 file names); fixed since, kept as regressions.
KNOWN_BUGS = [
    pytest.param(
        "nul.toml",
        lambda w: b'name = "a"\nprompt = "x"\nproject_dir = "a\\u0000b"\n',
        id="project_dir-relative-with-NUL",
    ),
    pytest.param(
        "nul.toml",
        lambda w: (
            f'name = "a"\nprompt_file = "a\\u0000b"\nproject_dir = "{w.path("project")}"\n'
        ).encode(),
        id="prompt_file-relative-with-NUL",
    ),
    pytest.param(
        "deep.toml",
        lambda w: b"x = " + b"[" * 3000 + b"]" * 3000 + b"\n",
        id="deeply-nested-array",
    ),
    pytest.param(
        "long-dir.toml",
        lambda w: f'name = "a"\nprompt = "x"\nproject_dir = "{"x" * 300}"\n'.encode(),
        id="project_dir-component-over-255-bytes",
    ),
    pytest.param(
        os.fsdecode(b"bad-\xff-name.toml"),
        lambda w: b'name = "a"\nprompt = "x"\nproject_dir = "/nonexistent"\n',
        id="non-utf8-file-name-rejected",
    ),
    pytest.param(
        os.fsdecode(b"ok-\xfe-name.toml"),
        lambda w: f'name = "a"\nprompt = "x"\nproject_dir = "{w.path("project")}"\n'.encode(),
        id="non-utf8-file-name-claimed",
    ),
]


#: Inputs that used to crash ``claim`` and must now be claimed or rejected cleanly.
FIXED_BUGS = [
    pytest.param(
        "nul.toml",
        lambda w: (
            f'name = "a"\nprompt_file = "/tmp/a\\u0000b"\nproject_dir = "{w.path("project")}"\n'
        ).encode(),
        id="prompt_file-with-NUL",
    ),
    pytest.param(
        "L" * 240 + ".toml",
        lambda w: b"not toml [",
        id="long-file-name-rejected",
    ),
    pytest.param(
        "tilde.toml",
        lambda w: b'name = "a"\nprompt = "x"\nproject_dir = "~nosuchuser_zz/p"\n',
        id="project_dir-tilde-unknown-user",
    ),
    pytest.param(
        "tilde.toml",
        lambda w: (
            f'name = "a"\nprompt_file = "~nosuchuser_zz/p"\nproject_dir = "{w.path("project")}"\n'
        ).encode(),
        id="prompt_file-tilde-unknown-user",
    ),
]


@pytest.mark.parametrize(("filename", "make"), FIXED_BUGS + KNOWN_BUGS)
def test_former_and_known_crashes(tmp_path: Path, filename: str, make: Any) -> None:
    with world(tmp_path) as w:
        check_claim(w, filename, make(w))


def test_long_file_name_rejected_twice(tmp_path: Path) -> None:
    with world(tmp_path) as w:
        filename = "L" * 240 + ".toml"
        check_claim(w, filename, b"not toml [", expect="rejected")
        check_claim(w, filename, b"not toml [", expect="rejected")


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029"], ids=["NEL", "LS", "PS"])
def test_events_survive_line_separators_in_file_names(tmp_path: Path, char: str) -> None:
    with world(tmp_path) as w:
        data = f'name = "a"\nprompt = "x"\nproject_dir = "{w.path("project")}"\n'.encode()
        check_claim(w, f"a{char}b.toml", data, expect="claimed")
        (task_dir,) = w.tasks.iterdir()
        assert [e["event"] for e in TaskDir(task_dir).events()] == ["queued"]


_CHILD = """
import sys, resource
from pathlib import Path
from supervisor import spool
from supervisor.config import load_profile
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
print(spool.claim(Path(sys.argv[1]), load_profile(sys.argv[2])))
"""


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_prompt_file_special_files(tmp_path: Path, target: str) -> None:
    """A FIFO as prompt_file used to block intake forever, and /dev/zero to read until
    memory ran out: both must now be rejected.

    Run in a child with a 1 GB address-space limit and a timeout, so a regression fails
    the test instead of hanging or exhausting the machine.
    """
    with world(tmp_path) as w:
        if target == "fifo":
            target = str(w.root / "outside" / "fifo")
            os.mkfifo(target)
        path = w.spool / "special.toml"
        path.write_text(
            f'name = "a"\nprompt_file = "{target}"\nproject_dir = "{w.path("project")}"\n'
        )
        try:
            child = subprocess.run(
                [sys.executable, "-c", _CHILD, str(path), str(w.profile.path)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("claim() blocked for 60 s")
        assert child.returncode == 0, child.stderr[-2000:]
        assert (w.spool / "rejected" / "special.toml.error").exists()


# ------------------------------------------------------------------ the real engine


def test_engine_survives_a_hostile_batch(setup: Any) -> None:
    """Eight hostile files at once into a real ``supervise run --exit-when-idle``."""
    tmp = setup.root
    setup.write_profile()
    project = str(setup.project)
    hostile_name = "../../x; rm -rf / :a.b 😀"
    files: dict[str, bytes] = {
        "valid-hostile.toml": tomli_w.dumps(
            setup.task(hostile_name, "print: hostile ok\n")
        ).encode(),
        "-rf.toml": tomli_w.dumps(
            {"name": "-rf", "prompt": "x", "project_dir": "../../x"}
        ).encode(),
        "traversal.toml": tomli_w.dumps(
            {"name": "/etc/passwd", "prompt_file": "../../x", "project_dir": "/etc/passwd"}
        ).encode(),
        "binary.toml": bytes(range(256)) * 8,
        "nul bytes.toml": b'name = "a\x00"\nprompt = "x"\x00\n',
        "huge.toml": tomli_w.dumps(
            {
                "name": "huge",
                "prompt": "y" * 200_000,
                "prompt_file": "/tmp/x",
                "project_dir": project,
            }
        ).encode(),
        "名前 😀 spaces.toml": b'name = "unterminated\nprompt = [\n',
        "wrong types.toml": b'name = 5\nprompt = ["a"]\nproject_dir = { a = 1 }\nmodle = true\n',
    }
    setup.spool.mkdir()
    for filename, data in files.items():
        tmp_file = setup.spool / f".{filename}.tmp"
        tmp_file.write_bytes(data)
        tmp_file.rename(setup.spool / filename)
    for stray in ("/tmp/x", tmp.parent / "x", tmp / "x"):
        assert not Path(stray).exists(), f"{stray} exists before the run"
    parent_before = sorted(os.listdir(tmp.parent))
    outside_before = snapshot(tmp, {"spool", "state", "project"})

    run = setup.run(timeout=90)

    assert run.returncode == 0, run.stderr[-3000:]
    manifests = setup.manifests()
    assert list(manifests) == [hostile_name], manifests
    manifest = manifests[hostile_name]
    assert manifest["status"] == "completed", manifest
    task_id = manifest["task_id"]
    assert spool.TASK_ID_RE.fullmatch(task_id) and SAFE_ID.fullmatch(task_id)
    assert manifest["session_name"] == task_id
    assert [p.name for p in (setup.state / "tasks").iterdir()] == [task_id]
    task_dir = setup.state / "tasks" / task_id
    assert (task_dir / "task.toml").read_bytes() == files["valid-hostile.toml"]
    assert (setup.project / "received_prompt.bin").read_bytes() == b"print: hostile ok\n"
    launched = [e for e in setup.events(task_id) if e["event"] == "launched"]
    assert launched and launched[0]["session_name"] == task_id
    rejected = setup.spool / "rejected"
    for filename, data in files.items():
        if filename == "valid-hostile.toml":
            continue
        assert (rejected / filename).read_bytes() == data, filename
        error = (rejected / f"{filename}.error").read_text(encoding="utf-8")
        assert error.strip() and filename in error, (filename, error)
    assert sorted(os.listdir(setup.spool)) == ["rejected"]
    assert len(os.listdir(rejected)) == 2 * (len(files) - 1)
    for stray in ("/tmp/x", tmp.parent / "x", tmp / "x"):
        assert not Path(stray).exists(), f"{stray} was created"
    assert sorted(os.listdir(tmp.parent)) == parent_before
    assert snapshot(tmp, {"spool", "state", "project"}) == outside_before


def test_output_into_a_closed_pipe_is_no_traceback(setup: Any) -> None:
    """``supervise config -c P | true``: the reader is gone before supervise writes (it
    starts in ~0.1 s, ``true`` in ~1 ms); supervise ends quietly with 141 (128 + SIGPIPE),
    not a BrokenPipeError traceback."""
    setup.write_profile()
    script = (f"{sys.executable} -m supervisor.cli config -c {setup.profile} | true; "
              "echo ${PIPESTATUS[0]}")  # fmt: skip
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=setup.root)  # fmt: skip
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stdout.strip() == "141"

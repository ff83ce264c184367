"""Plans in the views (issue 26), the one owner of the plan graph every view shows: what a
blocked task waits for (:func:`mark_blocked`), the edges as ``A (a-1) → B (b-2)`` lines
(``supervise status``, :func:`edges`), and the plans as a graph (:func:`graph`: one
:class:`Plan` per connected part of the ``after`` edges, each node with its status and
why it waits) for ``top``'s plan screen, ``serve``'s ``/plans`` and ``/api/plans``, and the
MCP ``plan`` tool. Pure: it works on a snapshot's tasks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor.taskdir.states import ENDED, Status
from supervisor.terminal import escape_controls

if TYPE_CHECKING:  # model calls mark_blocked: no import back at run time
    from supervisor.views.model import Task


def _label(by_id: dict[str, Task], task_id: str) -> str:
    task = by_id.get(task_id)
    name = task.name if task is not None else None
    return f"{name} ({task_id})" if name else task_id


def mark_blocked(tasks: list[Task]) -> None:
    """Set each blocked task's ``blocked_on`` (its predecessors' ids that have not ended;
    one whose folder is gone has ended) and its ``reason`` (``blocked on NAME (ID), ...``),
    which every view prints beside the verdict."""
    by_id = {task.task_id: task for task in tasks}
    for task in tasks:
        if task.status != Status.BLOCKED:
            continue
        task.blocked_on = [i for i in task.after if i in by_id and by_id[i].status not in ENDED]
        if task.blocked_on:
            task.reason = "blocked on " + ", ".join(_label(by_id, i) for i in task.blocked_on)
        else:
            task.reason = "blocked: its predecessors ended; it starts at the next intake"


def edges(tasks: list[Task]) -> list[str]:
    """``PREDECESSOR → TASK`` for each ``after`` of the shown tasks, then ``[STATUS]`` of the
    successor; terminal-safe. Empty when no task names a predecessor."""
    by_id = {task.task_id: task for task in tasks}
    lines = []
    for task in tasks:
        for before in task.after:
            line = f"{_label(by_id, before)} → {_label(by_id, task.task_id)} [{task.status}]"
            lines.append(escape_controls(line))
    return lines


#: Most edges one view lists (``top``'s plan screen, ``serve``'s ``/plans``, the MCP
#: ``plan`` tool): a plan of 1,000 tasks, each after up to 64, stays a page that renders;
#: the rest is counted (``Graph.edges_left_out``).
MAX_EDGES = 2000
#: The status shown for a predecessor whose folder is gone (archived or removed).
GONE = "gone"


@dataclass(frozen=True, slots=True)
class Node:
    """One task of a plan as every view shows it: ``task_id``, ``name`` (``None``: none),
    ``status`` (:data:`GONE` for a predecessor no longer in the state dir), ``verdict``
    (``PASS``, ``FAIL``, ... once it ended; ``None`` before), ``after`` (its
    predecessors' ids), ``blocked_on`` (those it still waits for) and ``reason`` (why it
    waits, or why it ended). Texts are as the manifest holds them: escape them to show."""

    task_id: str
    name: str | None
    status: str
    verdict: str | None = None
    after: tuple[str, ...] = ()
    blocked_on: tuple[str, ...] = ()
    reason: str | None = None

    def label(self) -> str:
        """``NAME (ID)`` (or the id alone), terminal-safe."""
        return escape_controls(f"{self.name} ({self.task_id})" if self.name else self.task_id)

    def state(self) -> str:
        """``completed FAIL``: the status, then the verdict when there is one."""
        return f"{self.status} {escape_controls(self.verdict)}" if self.verdict else self.status

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, lists for the tuples."""
        return {
            "task_id": self.task_id,
            "name": self.name,
            "status": self.status,
            "verdict": self.verdict,
            "after": list(self.after),
            "blocked_on": list(self.blocked_on),
            "reason": self.reason,
        }


@dataclass(slots=True)
class Plan:
    """One plan: the tasks joined by ``after`` (a connected part of the graph), in task id
    order, and its edges ``(predecessor id, successor id)`` in the successor's ``after``
    order. ``ended``: every task of it has ended (or is gone)."""

    nodes: dict[str, Node]
    edges: list[tuple[str, str]]

    @property
    def ended(self) -> bool:
        """Whether nothing of the plan is left to run."""
        return all(n.status in ENDED or n.status == GONE for n in self.nodes.values())

    def to_dict(self) -> dict[str, Any]:
        """``{"ended", "tasks": [Node.to_dict()], "edges": [{"from", "to"}]}``."""
        return {
            "ended": self.ended,
            "tasks": [node.to_dict() for node in self.nodes.values()],
            "edges": [{"from": a, "to": b} for a, b in self.edges],
        }


@dataclass(slots=True)
class Graph:
    """Every plan of a snapshot (:func:`graph`): those with a task left to run first, then
    the ended ones, each in order of its first task id; ``edges_left_out``: edges beyond
    :data:`MAX_EDGES` not listed (their plans are cut, or left out whole)."""

    plans: list[Plan] = field(default_factory=list)
    edges_left_out: int = 0

    def to_dict(self) -> dict[str, Any]:
        """``{"plans": [Plan.to_dict()], "edges_left_out": N}`` (``/api/plans``)."""
        return {
            "plans": [plan.to_dict() for plan in self.plans],
            "edges_left_out": self.edges_left_out,
        }


def _node(task: Task | None, task_id: str) -> Node:
    if task is None:
        return Node(task_id, None, GONE)
    return Node(
        task.task_id,
        task.name,
        task.status,
        task.verdict,
        tuple(task.after),
        tuple(task.blocked_on),
        task.reason or task.held,
    )


def _parts(tasks: list[Task]) -> list[list[str]]:
    """The connected parts of the ``after`` graph (ids; a gone predecessor included), each
    in id order, by union-find: linear in the edges."""
    parent: dict[str, str] = {}

    def root(i: str) -> str:
        parent.setdefault(i, i)
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for task in tasks:
        for before in task.after:
            parent[root(before)] = root(task.task_id)
    parts: dict[str, list[str]] = {}
    for i in sorted(parent):
        parts.setdefault(root(i), []).append(i)
    return list(parts.values())


def graph(tasks: list[Task], max_edges: int = MAX_EDGES) -> Graph:
    """The plans among ``tasks`` (a snapshot's, after :func:`mark_blocked`): one
    :class:`Plan` per connected part of the ``after`` edges, at most ``max_edges`` edges
    in all (see :class:`Graph`). Tasks with no edge are in no plan. Pure; linear."""
    by_id = {task.task_id: task for task in tasks}
    plans = []
    for ids in _parts(tasks):
        nodes = {i: _node(by_id.get(i), i) for i in ids}
        edges = [(before, i) for i in ids for before in nodes[i].after]
        plans.append(Plan(nodes, edges))
    plans.sort(key=lambda p: p.ended)  # stable: plans in progress first, then by id
    out, left = Graph(), max_edges
    for plan in plans:
        if left <= 0:
            out.edges_left_out += len(plan.edges)
            continue
        if len(plan.edges) > left:
            out.edges_left_out += len(plan.edges) - left
            plan.edges = plan.edges[:left]
        left -= len(plan.edges)
        out.plans.append(plan)
    return out


def edge_line(plan: Plan, before: str, after: str) -> str:
    """``A (a-1) [completed PASS] → B (b-2) [blocked]``, terminal-safe (``top``'s plan
    screen)."""
    a, b = plan.nodes[before], plan.nodes[after]
    return f"{a.label()} [{a.state()}] → {b.label()} [{b.state()}]"


def text(found: Graph) -> str:
    """The whole graph as plain text (``top``'s plan screen): per plan a title line, its
    edges, and why each waiting task waits; terminal-safe."""
    if not found.plans:
        return "no plans: no task names a predecessor ('after')"
    out: list[str] = []
    for number, plan in enumerate(found.plans, 1):
        state = "ended" if plan.ended else "in progress"
        out.append(f"plan {number}: {len(plan.nodes)} tasks, {state}")
        out += [f"  {edge_line(plan, a, b)}" for a, b in plan.edges]
        for node in plan.nodes.values():
            if node.status == Status.BLOCKED and node.reason:
                out.append(f"  {node.label()} waits: {escape_controls(node.reason)}")
        out.append("")
    if found.edges_left_out:
        out.append(f"{found.edges_left_out} more edges not shown")
    return "\n".join(out)


def members(tasks: list[Task], ids: list[str]) -> list[Node]:
    """The nodes of the tasks ``ids`` (a plan file's members, in file order), each as
    :func:`graph` shows it (:data:`GONE` for one no longer in ``tasks``)."""
    by_id = {task.task_id: task for task in tasks}
    return [_node(by_id.get(i), i) for i in ids]

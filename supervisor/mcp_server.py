"""``supervise mcp -c PROFILE``: the fleet as an MCP server over stdio (issue 22 item 6).

Built on the official MCP Python SDK (``mcp`` 2.x, its ``MCPServer``; the ``mcp`` extra:
``pip install 'supervise-agents[mcp]'``). Tools, each with a JSON schema derived from its
typed arguments and a one-line error text (``isError`` results) for a refusal:

``submit``      validate and submit a task (``supervise submit --prompt``)
``status``      the engine line, the spool and the task rows (``supervise status --json``)
``show``        one task's manifest (``supervise show``)
``wait``        until the tasks end or one needs a person, at most ``timeout`` seconds per
                call (default 60, at most 300): call it again while ``pending`` is not empty
``tail``        the end of a task's output (``supervise tail``)
``continue``    a follow-up prompt as the task's next turn (``supervise continue``)
``submit_plan`` a plan: one TOML of ``[[tasks]]`` or a list of task tables, ``after`` naming
                tasks of the plan (``supervise submit PLAN.toml``; :mod:`supervisor.mcp_plans`)
``plan``        follow a plan: each task's status, verdict, predecessors and why it waits
``approve`` ``deny`` ``stop`` ``resume``   the operator requests (``supervise approve ID``)

Resources (templates): ``supervise://task/{task_id}/manifest`` (JSON) and
``supervise://task/{task_id}/output`` (the rendered output, last :data:`OUTPUT_LINES`
lines). The work is in :mod:`supervisor.mcp_tools`: the same code paths as the CLI, and
only the profile the server was started with (task ids are slugs; no path argument).

The command itself is :mod:`supervisor.cli.mcp` (no SDK or pydantic import at CLI start).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, ValidationError

from supervisor import mcp_tools
from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from supervisor.config import LoadedProfile

#: The server's name in the MCP handshake; clients prefix its tools with it
#: (Claude Code: ``mcp__supervise__submit``).
SERVER_NAME = "supervise"
#: Lines of output the ``.../output`` resource holds.
OUTPUT_LINES = 200
INSTRUCTIONS = (
    "Supervised coding agents (supervise). submit a task (an absolute project_dir and a "
    "prompt), then wait on its task_id (repeat while 'pending' is not empty), read show "
    "(verdict, summary, claude.result) and tail. A task 'escalated' waits for approve or deny. "
    "submit_plan runs tasks in order ('after'); plan follows it."
)

TaskId = Annotated[str, Field(description="a task id, as submit and status give it")]
Offset = Annotated[
    int | None, Field(description="first row of the page: 0, or the answer's next_offset")
]
Limit = Annotated[
    int | None,
    Field(
        description=f"rows per page (default {mcp_tools.DEFAULT_ROWS}, "
        f"at most {mcp_tools.MAX_ROWS})"
    ),
]
WaitS = Annotated[
    float | None,
    Field(description="seconds to wait for the engine to apply it (default 15, at most 60)"),
]


def _refused(call: Callable[[], Any]) -> Any:
    """Run a tool body; a refusal becomes the SDK's ``ToolError`` (an ``isError`` result
    whose text is the one line)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return call()
    except mcp_tools.ToolRefused as exc:
        raise ToolError(escape_controls(str(exc))) from None


async def _guard(call: Callable[[], Any]) -> Any:
    """Run a tool body on a worker thread (waits block); a cancelled call (the client
    gone or its cancel) leaves the thread, which stops at its next slice once
    :data:`supervisor.mcp_tools.CLOSING` is set."""
    import anyio

    return await anyio.to_thread.run_sync(_refused, call, abandon_on_cancel=True)


def argument_errors(tool: str, exc: ValidationError) -> str:
    """The SDK's argument validation failure as one line: ``TOOL: argument 'KEY': what
    (got VALUE)`` per problem, joined with "; " (pydantic's own text spans lines)."""
    problems = []
    for item in exc.errors():
        key = ".".join(str(part) for part in item.get("loc", ())) or "?"
        got = "" if item.get("type") == "missing" else f" (got {item.get('input')!r:.80})"
        problems.append(f"argument '{key}': {item.get('msg')}{got}")
    return escape_controls(f"{tool}: {'; '.join(problems)}; see the tool's input schema")


def build_server(profile: LoadedProfile) -> MCPServer:
    """The :class:`mcp.server.MCPServer` with every tool and resource bound to
    ``profile``. Raises ``ImportError`` without the ``mcp`` extra."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    class Server(MCPServer):  # type: ignore[type-arg]
        """Argument errors in one line (the SDK's are pydantic's multi-line text)."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    raise ToolError(argument_errors(name, exc.__cause__)) from None
                raise

    server: MCPServer = Server(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")
    _task_tools(server, profile)
    _work_tools(server, profile)
    _request_tools(server, profile)
    _plan_tools(server, profile)
    _resources(server, profile)
    return server


def _task_tools(server: MCPServer, profile: LoadedProfile) -> None:
    text = mcp_tools.as_text

    @server.tool(structured_output=False)
    async def submit(
        name: Annotated[str, Field(description="task name (letters, digits, '-', '_', '.')")],
        prompt: Annotated[str, Field(description="the instruction for the agent")],
        project_dir: Annotated[str, Field(description="absolute path of the project folder")],
        model: Annotated[str | None, Field(description="model alias or id")] = None,
        task: Annotated[
            dict[str, Any] | None,
            Field(description="other task-file keys: monitor, acceptance, workspace, env, host"),
        ] = None,
    ) -> str:
        """Validate a task as a task file is and submit it; returns its task_id."""
        fields = {**(task or {}), "name": name, "prompt": prompt, "project_dir": project_dir}
        if model is not None:  # else a model in ``task`` stands
            fields["model"] = model
        return await _guard(lambda: text(mcp_tools.submit(profile, fields)))

    @server.tool(structured_output=False)
    async def status(
        statuses: Annotated[
            list[str] | None, Field(description="only these statuses or groups, e.g. needs_you")
        ] = None,
        offset: Offset = None,
        limit: Limit = None,
    ) -> str:
        """The engine line, the spool and one row per task (status, verdict, reason), a
        page at a time: 'total' tasks, the next page from 'next_offset' (null: the last)."""
        return await _guard(lambda: text(mcp_tools.status(profile, statuses, offset, limit)))

    @server.tool(structured_output=False)
    async def show(task_id: TaskId) -> str:
        """One task's manifest: status, verdict, summary, claude.result, cost, reasons."""
        return await _guard(lambda: text(mcp_tools.manifest(profile, task_id)))

    @server.tool(structured_output=False)
    async def wait(
        task_ids: Annotated[list[str], Field(description="the task ids to wait for")],
        timeout: Annotated[
            float | None, Field(description="seconds to block (default 60, at most 300)")
        ] = None,
        terminal_only: Annotated[
            bool, Field(description="wait through escalations: return only when all ended")
        ] = False,
        full: Annotated[
            bool, Field(description="each ended task's whole manifest, not its brief fields")
        ] = False,
    ) -> str:
        """Block until every task ended, or one needs a person (escalated: 'needs_you',
        its needs in 'tasks'), or timeout passed ('pending': call wait again); 'code' is
        supervise wait's exit status (0 all PASS, 1 not, 10 needs you, 124 timeout). An
        ended task comes as supervise wait --brief gives it (status, verdict, turn, reasons,
        summary, result, cost_usd); 'full' gives its whole manifest (raw output included)."""
        return await _guard(
            lambda: text(mcp_tools.wait(profile, task_ids, timeout, terminal_only, full))
        )

    @server.tool(structured_output=False)
    async def tail(
        task_id: TaskId,
        lines: Annotated[int | None, Field(description="lines (default 40, at most 2000)")] = None,
    ) -> str:
        """The last lines of a task's output."""
        return await _guard(lambda: mcp_tools.tail(profile, task_id, lines))


def _plan_tools(server: MCPServer, profile: LoadedProfile) -> None:
    from supervisor import mcp_plans

    text = mcp_tools.as_text

    @server.tool(structured_output=False)
    async def submit_plan(
        plan_toml: Annotated[
            str | None,
            Field(description="the plan as one TOML text of [[tasks]] tables (or give tasks)"),
        ] = None,
        tasks: Annotated[
            list[dict[str, Any]] | None,
            Field(
                description="the plan as task tables: name, prompt, absolute project_dir, "
                "after = [names of tasks it waits for], requires = 'pass' | 'end'"
            ),
        ] = None,
    ) -> str:
        """Submit a plan: tasks that start only after the tasks they name in 'after' end
        (with PASS by default); '{after.NAME.summary}' in a prompt is NAME's result. A
        cycle or an unknown name is refused. Returns the plan's name: follow it with plan."""
        return await _guard(lambda: text(mcp_plans.submit_plan(profile, plan_toml, tasks)))

    @server.tool(structured_output=False)
    async def plan(
        plan: Annotated[
            str, Field(description="the plan's name from submit_plan, or any of its task ids")
        ],
        offset: Offset = None,
        limit: Limit = None,
    ) -> str:
        """Follow a plan: each task's status, verdict, predecessors ('after'), those it
        still waits for ('blocked_on') and why ('reason'); 'done' once every task ended.
        'done' and 'counts' cover the whole plan, 'tasks' one page ('next_offset')."""
        return await _guard(lambda: text(mcp_plans.follow(profile, plan, offset, limit)))


def _work_tools(server: MCPServer, profile: LoadedProfile) -> None:
    """Issue 26's tools: ``cost`` and ``attempts``."""
    text = mcp_tools.as_text

    @server.tool(structured_output=False)
    async def cost(
        days: Annotated[
            int | None, Field(description="today and the days-1 before; none: all time")
        ] = None,
    ) -> str:
        """Spend per day, account and task, and the profile's daily budget (reached: new
        launches wait); supervise cost --json."""
        return await _guard(lambda: text(mcp_tools.cost(profile, days)))

    @server.tool(structured_output=False)
    async def attempts(
        id: Annotated[str, Field(description="the attempts group id, or any attempt's id")],
    ) -> str:
        """The attempts of a task submitted with attempts = N: pick, winner, summed cost,
        and per attempt its model, status, verdict, cost and diff size; supervise attempts."""
        return await _guard(lambda: text(mcp_tools.attempts(profile, id)))


def _request_tools(server: MCPServer, profile: LoadedProfile) -> None:
    text = mcp_tools.as_text
    texts = {
        "approve": "Allow what an escalated task waits for (or unpause it).",
        "deny": "Refuse what an escalated task waits for (the agent is told no).",
        "stop": "End a task now as abandoned (reason 'stopped').",
        "resume": "Stop the agent and resume it now.",
    }
    for verb, doc in texts.items():
        server.add_tool(
            _verb_tool(profile, verb), name=verb, description=doc, structured_output=False
        )

    @server.tool(name="continue", structured_output=False)
    async def continue_(task_id: TaskId, prompt: str, wait_s: WaitS = None) -> str:
        """Continue a task's conversation with a follow-up prompt, as a new turn."""
        return await _guard(lambda: text(mcp_tools.follow_up(profile, task_id, prompt, wait_s)))


def _verb_tool(profile: LoadedProfile, verb: str) -> Callable[..., Awaitable[str]]:
    """The body of one request tool (``approve``, ``deny``, ``stop``, ``resume``)."""

    async def verb_tool(task_id: TaskId, wait_s: WaitS = None) -> str:
        return await _guard(
            lambda: mcp_tools.as_text(mcp_tools.request(profile, task_id, verb, wait_s))
        )

    return verb_tool


def _resources(server: MCPServer, profile: LoadedProfile) -> None:
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError

    def found(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except mcp_tools.ToolRefused as exc:
            raise ResourceNotFoundError(escape_controls(str(exc))) from None

    @server.resource("supervise://task/{task_id}/manifest", mime_type="application/json")
    def task_manifest(task_id: str) -> str:
        """A task's manifest.json."""
        return found(lambda: mcp_tools.as_text(mcp_tools.manifest(profile, task_id)))

    @server.resource("supervise://task/{task_id}/output", mime_type="text/plain")
    def task_output(task_id: str) -> str:
        """A task's output, rendered (the last lines)."""
        return found(lambda: mcp_tools.tail(profile, task_id, OUTPUT_LINES))

"""The table ``benchmarks/cluster.py`` prints from its result (the JSON it writes)."""

from __future__ import annotations

from typing import Any


def _rates(window: dict[str, Any] | None) -> str:
    if not window:
        return "n/a"
    return (
        f"{window['xact_per_s']} xact/s ({window['xact_per_s_per_engine']} per engine), "
        f"{window['notifications_per_s']} notifications/s, load "
        f"{window['load_at_start']}->{window['load_at_end']}"
    )


def _connections(window: dict[str, Any] | None) -> str:
    figures = (window or {}).get("connections")
    if not figures:
        return "n/a"
    return (
        f"total steady {figures['total_steady']} / peak {figures['total_peak']}; "
        f"per engine steady <= {figures['engine_steady_max']}, peak <= "
        f"{figures['engine_peak_max']}"
    )


def _latency(result: dict[str, Any]) -> list[str]:
    lat = result.get("latency", {})
    if "submit_to_running" not in lat:
        return [f"  {'submit -> running':28} {lat.get('failed', 'not run')}"]
    lines = []
    for label, key in (
        ("submit -> running", "submit_to_running"),
        ("  the submit call", "submit_call"),
        ("  submit -> claimed", "submit_to_claimed"),
        ("  claimed -> running", "claimed_to_running"),
    ):
        s = lat[key]
        lines.append(
            f"  {label:28} p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  "
            f"max {s['max_ms']:7.1f} ms  ({s['n']} tasks, a free slot each)"
        )
    lines.append(f"  {'  its window':28} {_rates(lat.get('window'))}")
    return lines


def _throughput(result: dict[str, Any]) -> list[str]:
    thr = result.get("throughput", {})
    if "tasks_per_s" not in thr:
        return [f"  {'throughput':28} {thr.get('failed', 'not run')}"]
    return [
        f"  {'throughput':28} {thr['tasks_per_s']} tasks/s ({thr['tasks']} tasks in "
        f"{thr['seconds']} s; engines' CPU {thr['engine_cpu_ms_per_task']} ms/task)",
        f"  {'  under load':28} {_rates(thr.get('window'))}",
        f"  {'  connections under load':28} {_connections(thr.get('window'))}",
    ]


def _loss(result: dict[str, Any]) -> list[str]:
    loss = result.get("loss", {})
    if "victim" not in loss:
        return [f"  {'host loss':28} {loss.get('failed', 'not run')}"]
    first = loss.get("kill_to_first_running_elsewhere_s")
    every = loss.get("kill_to_all_running_elsewhere_s")
    return [
        f"  {'host loss':28} {loss['victim']} with {loss['tasks']} tasks, "
        f"{loss['queued_at_kill']} queued at the kill (each ~{loss['backlog_sleep_s']} s), "
        f"host_timeout {loss['host_timeout_s']:g} s, load {loss['load_at_kill']}",
        f"  {'  victim at the kill':28} {loss.get('victim_state_at_kill', '?')}, owning "
        f"{loss.get('victim_owned_at_kill', '?')} of its {loss['tasks']} tasks",
        f"  {'  kill -> dead / requeued':28} {loss.get('kill_to_dead_s')} s / "
        f"{loss.get('kill_to_requeued_s')} s",
        f"  {'  kill -> running elsewhere':28} first "
        f"{first} s, all {every} s "
        f"({loss.get('queued_when_all_ran', '?')} still queued then) "
        f"{loss.get('unfinished', '')}",
    ]


def print_report(result: dict[str, Any]) -> None:
    """Print ``result`` as a table: one line a figure, with the load beside it."""
    machine = result["machine"]
    print(
        f"\n{result['hosts']} engines x {result['slots']} slots on one machine: "
        f"{machine['cpus']} cores, {machine['platform']}, load before "
        f"{machine['load_average_before']}, heartbeat {result['heartbeat_s']:g} s, "
        f"PostgreSQL max_connections 100 (default)"
    )
    failed = result.get("startup_failed")
    if failed:
        print(
            f"  {'fleet start':28} FAILED: {failed['hosts_with_row']} of {result['hosts']} "
            f"hosts beat, {failed['engines_alive']} engines alive, "
            f"{failed['log_lines_naming_the_limit']} log lines naming the limit"
        )
        print(f"  {'  first such line':28} {failed['first_such_line']}")
        print(f"  {'  connections':28} {_connections(failed)}")
        print(f"  {'  rates':28} {_rates(failed)}")
        return
    idle = result.get("idle", {}).get("window")
    print(f"  {'start (all hosts beat)':28} {result.get('start_seconds')} s")
    print(f"  {'idle connections':28} {_connections(idle)}")
    print(f"  {'idle rates':28} {_rates(idle)}")
    for line in _latency(result) + _throughput(result) + _loss(result):
        print(line)
    whole = result.get("whole_run")
    if whole:
        print(
            f"  {'whole run, connections':28} total peak {whole['total_peak']}, one engine's "
            f"peak {whole['engine_peak_max']}, others' (submits, this) peak "
            f"{whole['other_peak']}"
        )

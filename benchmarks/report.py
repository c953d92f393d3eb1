"""RESULTS.md from the suite's results: every number in it comes from the run it describes."""

from __future__ import annotations

from typing import Any

# The targets of the scale work, on this machine (2 cores; coordinators, workers and Redis
# local): each is written next to its figure in RESULTS.md's Targets table.
TURN_CPU_MAX_MS = 3.0  # N=4, instant agents, coordinator + keeper + worker + Redis
ADDED_MEDIAN_MAX_MS = {4: 3.0, 16: 3.0, 40: 6.0}  # 50 ms agents, over the slowest call
ADDED_P95_MAX_OVER_MEDIAN = 2.0
MANY_ROOMS_MIN_TURNS_PER_S = 600.0
TEN_K_ROOMS_MAX_MB = 600.0
TEN_K_LEASED_MAX_S = 60.0
TAKEOVER_MARGIN_S = 3.0  # over the lease ttl
WORKER_IN_FLIGHT_MIN = 2000
WORKER_MAX_MB = 1024
OWN_CPU_MAX_MS = {40: 1.0, 560: 1.5}
N40_SLEEPING_MAX_SWARMS_RATIO = 0.6


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def verdict(ok: bool) -> str:
    """The table cell for a target."""
    return "met" if ok else "**missed**"


def row_of(runs: list[dict], agents: int, sleep_s: float) -> dict | None:
    """The run of N=``agents`` with calls sleeping ``sleep_s``, if there was one."""
    return next((r for r in runs if r["agents"] == agents and r["sleep_s"] == sleep_s), None)


def targets(results: dict) -> list[str]:
    """The headline table: each target, what this run measured, met or missed."""
    groups = [(turn_targets, "CPU per turn (N=4) and time over the slowest call (N=4, 16, 40)"),
              (many_rooms_targets, "1,000 live rooms, one coordinator and two"),
              (held_rooms_targets, "10,000 rooms held by one coordinator"),
              (takeover_targets, "Takeover of 1,000 active rooms"),
              (worker_targets, "One worker process: calls in flight, CPU per call"),
              (n40_target, "N=40, 50 ms agents, against swarms in-process")]
    # A target this run did not measure still has its row: it is not met.
    rows = [row for group, what in groups
            for row in group(results) or [[what, "not measured in this run", verdict(False)]]]
    return ["## Targets", "", *table(["target", "measured", ""], rows), ""]


def turn_targets(results: dict) -> list[list[str]]:
    """CPU per turn at N=4 and the time over the slowest call at N=4, 16 and 40."""
    parley = results.get("turns", {}).get("runs", [])
    rows = []
    n4 = row_of(parley, 4, 0.0)
    if n4:
        parts = {name: n4.get(f"{name}_cpu_ms", 0.0)
                 for name in ("coordinator", "keeper", "worker", "redis")}
        cpu = sum(parts.values())
        rows.append([f"CPU per turn, N=4 instant agents, all processes together: at most "
                     f"{TURN_CPU_MAX_MS:g} ms",
                     f"{cpu:.2f} ms (" + ", ".join(f"{name} {ms:.2f}" for name, ms in parts.items())
                     + ")", verdict(cpu <= TURN_CPU_MAX_MS)])
    for agents, limit in ADDED_MEDIAN_MAX_MS.items():
        row = row_of(parley, agents, 0.05)
        if row and "added_median_ms" in row:
            median, p95 = row["added_median_ms"], row["added_p95_ms"]
            rows.append([f"N={agents}, 50 ms agents: time over the slowest call (turn records) "
                         f"median at most {limit:g} ms, p95 at most "
                         f"{ADDED_P95_MAX_OVER_MEDIAN:g}x the median",
                         f"{median:.2f} ms median, {p95:.2f} ms p95 = "
                         f"{p95 / median if median > 0 else float('inf'):.1f}x",
                         verdict(median <= limit
                                 and p95 <= ADDED_P95_MAX_OVER_MEDIAN * max(median, 0.0))])
    return rows


def many_rooms_targets(results: dict) -> list[list[str]]:
    """1,000 live rooms: turns/s with no lease lost, and two coordinators against one."""
    runs = [r for r in results.get("many_rooms", []) if not r.get("settings")]
    one = next((r for r in runs if r["coordinators"] == 1), None)
    two = next((r for r in runs if r["coordinators"] == 2), None)
    rows = []
    if one:
        rows.append([f"{one['rooms']:,} live rooms, 200 ms agents: at least "
                     f"{MANY_ROOMS_MIN_TURNS_PER_S:.0f} turns/s with no lease lost",
                     f"{one['turns_per_s']:.0f} turns/s, lease churn {one['lease_churn']}",
                     verdict(one["turns_per_s"] >= MANY_ROOMS_MIN_TURNS_PER_S
                             and one["lease_churn"] == 0)])
    if one and two:
        rows.append([f"{two['rooms']:,} live rooms: two coordinators at least as many turns/s "
                     "as one, with no lease lost",
                     f"{two['turns_per_s']:.0f} vs {one['turns_per_s']:.0f} turns/s, lease "
                     f"churn {two['lease_churn']}",
                     verdict(two["turns_per_s"] >= one["turns_per_s"]
                             and two["lease_churn"] == 0)])
    return rows


def held_rooms_targets(results: dict) -> list[list[str]]:
    """10,000 rooms on one coordinator (benchmarks/held_rooms.py)."""
    held = results.get("ten_thousand_rooms")
    if not held:
        return []
    what = (f"{held['rooms']:,} rooms held by one coordinator: at most {TEN_K_ROOMS_MAX_MB:.0f} "
            f"MB, leased within {TEN_K_LEASED_MAX_S:.0f} s, no lease lost over "
            f"{held.get('minutes', 10):g} minutes of turns and forced full GCs (SIGUSR1)")
    if "error" in held:
        return [[what, held["error"], verdict(False)]]
    ok = (held["peak_rss_mb"] <= TEN_K_ROOMS_MAX_MB and held["leased_s"] <= TEN_K_LEASED_MAX_S
          and held["lease_churn"] == 0 and held["rooms_without_lease"] == 0
          and held["forced_gcs"] > 0)
    return [[what, f"{held['peak_rss_mb']:.0f} MB peak (coordinator "
             f"{held['coordinator_peak_rss_mb']:.0f} + keeper {held['keeper_peak_rss_mb']:.0f}), "
             f"leased in {held['leased_s']:.1f} s, lease churn {held['lease_churn']}, "
             f"{held['rooms_without_lease']} running rooms unheld, {held['turns']:,} turns, "
             f"{held['forced_gcs']} forced GCs (longest {held['gc_max_s']:.2f} s)", verdict(ok)]]


def takeover_targets(results: dict) -> list[list[str]]:
    """kill -9 of a coordinator holding 1,000 active rooms (benchmarks/takeover.py --active)."""
    scale = results.get("takeover_at_scale")
    if not scale:
        return []
    what = (f"Takeover: kill -9 of a coordinator holding {scale['rooms']:,} active rooms; the "
            f"standby commits every one again within ttl + {TAKEOVER_MARGIN_S:g} s, none twice")
    if "error" in scale:
        return [[what, scale["error"], verdict(False)]]
    bound = scale["lease_ttl_s"] + TAKEOVER_MARGIN_S
    ok = (scale["committed_again"] == scale["rooms"] and scale["max_s"] <= bound
          and scale["duplicates"] == 0)
    return [[what, f"{scale['committed_again']:,} of {scale['rooms']:,} again, median "
             f"{scale['median_s']:.2f} s, max {scale['max_s']:.2f} s (bound {bound:g} s), "
             f"{scale['duplicates']} committed twice", verdict(ok)]]


def worker_targets(results: dict) -> list[list[str]]:
    """One worker process: calls in flight, its memory, its own CPU per call."""
    calls = results.get("worker_calls")
    if not calls:
        return []
    rows = []
    for run in (r for r in calls["in_flight"] if r.get("answer_after_s") == 2.0):
        held = run.get("most_in_flight", 0)
        rows.append([f"One worker process ({run['model']}): at least {WORKER_IN_FLIGHT_MIN:,} "
                     f"LLM calls in flight, stub answering after 2 s, at most "
                     f"{WORKER_MAX_MB / 1024:g} GB, no call waiting for a free slot",
                     run.get("error") or f"{held:,} at once of {run['calls']:,}, "
                     f"{run['rss_mb']} MB, {run['cpu_ms_per_call']} ms CPU a call",
                     verdict(held >= WORKER_IN_FLIGHT_MIN and held >= run["calls"]
                             and run.get("rss_mb", 1e9) <= WORKER_MAX_MB)])
    for own in calls["own_cpu"]:
        limit = OWN_CPU_MAX_MS[own["messages"]]
        rows.append([f"Worker CPU per LLM call over HTTP less litellm.completion's own, "
                     f"{own['messages']} messages: at most {limit:g} ms",
                     f"{own['own_ms']:.2f} ms ({own['worker_ms']:.2f} - {own['litellm_ms']:.2f})",
                     verdict(own["own_ms"] <= limit)])
    return rows


def n40_target(results: dict) -> list[list[str]]:
    """N=40 with 50 ms agents against swarms in-process, same run."""
    n40 = row_of(results.get("turns", {}).get("runs", []), 40, 0.05)
    s40 = row_of(results.get("anchor", {}).get("runs", []), 40, 0.05)
    if not (n40 and s40):
        return []
    ratio = n40["median_ms"] / s40["median_ms"]
    return [[f"N=40, 50 ms agents: at most {N40_SLEEPING_MAX_SWARMS_RATIO:g}x swarms in-process",
             f"{n40['median_ms']:.2f} ms = {ratio:.2f}x swarms' {s40['median_ms']:.2f} ms",
             verdict(ratio <= N40_SLEEPING_MAX_SWARMS_RATIO)]]


def worker_calls(results: dict) -> list[str]:
    """Section 9: one worker process holding many calls."""
    calls = results.get("worker_calls")
    if not calls:
        return []
    rows = [[r["model"], f"{r.get('answer_after_s', 0):g} s", r["calls"],
             r.get("most_in_flight", "-"), r.get("arrived_within_s", "-"), r.get("rss_mb", "-"),
             r.get("cpu_ms_per_call", "-"), r.get("wall_s", "-"),
             r.get("statuses", r.get("error", ""))]
            for r in calls["in_flight"]]
    return ["## 9. One worker holding many calls", "",
            "`.venv/bin/python -m benchmarks.worker_calls --hold 2000`: a process starts "
            "every call at once through the worker's bid code; the stub counts how many it "
            "held at once, and from the first call's arrival to the last one's. CPU per call "
            "is the whole process's.", "",
            *([f"Measured in a run of its own: `{calls['command']}`, {calls['date']}.", ""]
              if "command" in calls else []),
            *table(["pool", "answer after", "calls", "most at once", "arrived within s",
                    "peak RSS MB", "CPU ms/call", "wall s", "answers"], rows), ""]


def per_turn(results: dict) -> list[str]:
    """Sections 1 and 2: parley and the swarms anchor side by side."""
    parley = results.get("turns", {}).get("runs", [])
    swarms = results.get("anchor", {}).get("runs", [])
    rows = []
    for run in parley:
        anchor = row_of(swarms, run["agents"], run["sleep_s"])
        ratio = f"{run['median_ms'] / anchor['median_ms']:.1f}x" if anchor else "-"
        rows.append([run["agents"], f"{run['sleep_s'] * 1000:.0f} ms",
                     f"{run['median_ms']:.2f}", f"{run['p95_ms']:.2f}",
                     f"{anchor['median_ms']:.2f}" if anchor else "-",
                     f"{anchor['p95_ms']:.2f}" if anchor else "-", ratio])
    turns = parley[0]["turns"] if parley else 0
    return [
        "## 1-2. Per-turn time: parley against swarms in-process", "",
        f"Scripted agents (no LLM client on either side), {turns} measured turns per room "
        "(turn 1 left out on both sides: a room's pick-up here, the thread pool's start in "
        "swarms). A turn is the interval between two consecutive committed messages of a "
        "room; in swarms between two consecutive posts. Times in ms.", "",
        *table(["N", "call sleep", "parley median", "parley p95", "swarms median",
                "swarms p95", "parley / swarms"], rows), ""]


def history(results: dict) -> list[str]:
    """Section 3: turn 10 against turn 1,000 of one long room."""
    parley = results.get("turns", {}).get("history")
    swarms = results.get("anchor", {}).get("history")
    rows = [[name, f"{h['early_median_ms']:.2f}", f"{h['late_median_ms']:.2f}",
             f"{h['late_over_early']:.2f}x"] for name, h in (("parley", parley), ("swarms", swarms))
            if h]
    if not rows:
        return []
    h = parley or swarms
    return ["## 3. History growth", "",
            f"One room of N={h['agents']} scripted agents, {h['turns']} turns. Median turn "
            f"time over turns {h['early_window'][0]}-{h['early_window'][1]} and over turns "
            f"{h['late_window'][0]}-{h['late_window'][1]}, in ms.", "",
            *table(["", "around turn 10", "around turn 1,000", "growth"], rows), ""]


def many_rooms(results: dict) -> list[str]:
    """Section 4: many rooms live at once, one coordinator then two."""
    runs = results.get("many_rooms", [])
    if not runs:
        return []
    rows = [[r["coordinators"], ", ".join(f"{k}={v}" for k, v in r.get("settings", {}).items())
             or "defaults", r["rooms"], f"{r['turns_per_s']:.0f}",
             f"{r['latency_median_ms']:.0f}", f"{r['latency_p95_ms']:.0f}",
             " + ".join(f"{mb:.0f}" for mb in r["coordinator_peak_rss_mb"]),
             " / ".join(map(str, r["rooms_per_coordinator"])), r["rooms_without_lease"],
             r["lease_churn"],
             ", ".join(f"{name} {cores:.2f}" for name, cores in r["cpu_cores"].items())]
            for r in runs]
    first = runs[0]
    return ["## 4. Many rooms", "",
            f"{first['rooms']:,} rooms live at once, 4 scripted agents each sleeping 200 ms per "
            f"call, served by {first['workers']} worker processes (threads pool, concurrency "
            f"{first['worker_concurrency']} each). The workers start once the coordinators "
            f"hold every room; a {first['window_s']:.0f} s window is measured after a warm-up. "
            "Latency is the time a room waits from one committed message to its next. "
            "Lease churn counts how often a coordinator stopped work on a room because it "
            "could not vouch for the room's lease any more (a renewal that came too late "
            "under this load); such a room waits for its lease to expire and is taken "
            "again, resuming its open turn.", "",
            *table(["coordinators", "settings", "rooms", "turns/s", "latency median ms",
                    "latency p95 ms",
                    "coordinator peak RSS MB", "rooms held at the end",
                    "rooms between holders", "lease churn",
                    "CPU cores used"], rows), ""]


def waves(results: dict) -> list[str]:
    """Section 5: whether a big room's calls all run at once."""
    suite = results.get("turns", {})
    sleeping = [r for r in suite.get("runs", []) if r["sleep_s"]] + suite.get("wave_variants", [])
    rows = [[r["agents"], ", ".join(f"{k}={v}" for k, v in r.get("settings", {}).items())
             or "defaults", f"{r['median_ms']:.2f}", f"{r['open_to_last_bid_median_ms']:.2f}",
             f"{r['open_to_last_bid_max_ms']:.2f}", "yes" if r["one_wave"] else "**no**",
             f"{r['added_median_ms']:.2f}" if "added_median_ms" in r else "",
             f"{r['added_p95_ms']:.2f}" if "added_p95_ms" in r else ""]
            for r in sleeping]
    if not rows:
        return []
    settings = suite.get("worker_settings", {})
    return ["## 5. Worker concurrency: one wave", "",
            "Agents sleeping 50 ms per call. One wave means every call of a turn is in flight "
            "at once: the last bid is written about 50 ms after the turn opened, not 100. "
            "Over the slowest call: from the turn records, the time from the previous turn's "
            "decision to this one's less the longest call latency a worker recorded in it.", "",
            *table(["N", "settings", "turn median ms", "open to last bid, median ms",
                    "open to last bid, max ms", "one wave", "over the slowest call, median ms",
                    "p95 ms"], rows), "",
            "Worker settings of this run: " + ", ".join(f"`{k}={v}`" for k, v in settings.items()),
            ""]


def takeover(results: dict) -> list[str]:
    """Section 6: the failover benchmark's own report, when it exists."""
    output = results.get("takeover")
    if output is None:
        return ["## 6. Takeover", "", "benchmarks/takeover.py does not exist yet: no takeover "
                "figures in this run.", ""]
    return ["## 6. Takeover", "", "`.venv/bin/python -m benchmarks.takeover`, as it reported:",
            "", "```", output.strip(), "```", ""]


def held_rooms(results: dict) -> list[str]:
    """Section 4b: 10,000 rooms held by one coordinator through minutes of turns."""
    held = results.get("ten_thousand_rooms")
    if not held or "error" in held:
        return []
    gcs = ", ".join(f"{s:.2f}" for s in held["gc_s"]) or "none"
    return ["## 4b. Rooms held by one coordinator", "",
            f"`{held['command']}`: {held['rooms']:,} rooms of {held['agents']} scripted agents "
            f"sleeping {held['sleep_s'] * 1000:.0f} ms a call, created before one coordinator "
            f"(`PARLEY_COORDINATOR_CAPACITY={held['rooms']}`, debug signals on) starts; "
            f"{held['workers']} workers. Leased is from the coordinator's start to every room "
            f"holding its lease. Then {held['window_s']:.0f} s of turns with a SIGUSR1 (a forced "
            f"full garbage collection of the coordinator's heap) every "
            f"{held['gc_every_s']:g} s; lease churn counts rooms the coordinator stopped "
            "serving for their lease.", "",
            *table(["rooms", "leased in s", "coordinator RSS MB (peak)", "keeper RSS MB (peak)",
                    "turns", "turns/s", "latency median ms", "lease churn",
                    "running rooms unheld", "rooms whose script ran out",
                    "rooms whose run never began", "forced GCs, s each"],
                   [[f"{held['rooms']:,}", f"{held['leased_s']:.1f}",
                     f"{held['coordinator_rss_mb']:.0f} ({held['coordinator_peak_rss_mb']:.0f})",
                     f"{held['keeper_rss_mb']:.0f} ({held['keeper_peak_rss_mb']:.0f})",
                     f"{held['turns']:,}", f"{held['turns_per_s']:.0f}",
                     f"{held['latency_median_ms']:.0f}" if held["latency_median_ms"] else "-",
                     held["lease_churn"], held["rooms_without_lease"], held["rooms_finished"],
                     held.get("rooms_not_started", "-"), gcs]]), ""]


def takeover_at_scale(results: dict) -> list[str]:
    """Section 6b: kill -9 of a coordinator holding many active rooms, a standby running."""
    scale = results.get("takeover_at_scale")
    if not scale or "error" in scale:
        return []
    return ["## 6b. Takeover at scale", "",
            f"`{scale['command']}`: one coordinator holds {scale['rooms']:,} active rooms "
            f"(3 scripted agents sleeping 50-200 ms, never lulling) with a standby running; "
            f"once every room has had five turns, `kill -9` of the holder at a random point "
            f"of its renewal period. Per room, the "
            f"time from the kill to its next committed message; every room's log is then "
            f"checked for a (run, turn) committed twice. Lease ttl {scale['lease_ttl_s']:g} s.",
            "", *table(["rooms", "committed again", "median s", "p95 s", "max s", "min s",
                        "committed twice", "held by the standby after"],
                       [[f"{scale['rooms']:,}", f"{scale['committed_again']:,}",
                         f"{scale['median_s']:.2f}", f"{scale['p95_s']:.2f}",
                         f"{scale['max_s']:.2f}", f"{scale['min_s']:.2f}", scale["duplicates"],
                         f"{scale['standby_holds']:,}"]]), ""]


def llm_cost(results: dict) -> list[str]:
    """Section 7: what the LLM client itself costs a worker."""
    cost = results.get("llm_cost")
    if not cost:
        return []
    rows = [[c["messages"], f"{c['mock']['cpu_ms']:.2f}", f"{c['mock']['wall_ms']:.2f}",
             f"{c['stub']['cpu_ms']:.2f}", f"{c['stub']['wall_ms']:.2f}"]
            for c in cost["per_call"]]
    worker = cost["worker"]
    reads = worker["transcript_read"]
    return ["## 7. The LLM client's own cost", "",
            "One bid through the worker's own code (prompt, litellm.completion with the forced "
            "respond tool, parsing, cost accounting): through litellm's mock parameters, and "
            "over HTTP to a local OpenAI-compatible stub server. CPU is the calling thread's "
            "only (the stub's threads are not counted); medians, in ms.", "",
            *table(["transcript messages", "mock CPU", "mock wall", "stub CPU", "stub wall"],
                   rows), "",
            f"- `import litellm`: {cost['import_litellm_s']:.2f} s in a fresh interpreter.",
            f"- A fresh worker answers its first scripted bid {worker['first_scripted_bid_s']:.2f} s "
            f"after it is started, and its first LLM bid (litellm imported in the background "
            f"at start-up) {worker['first_llm_bid_s']:.2f} s after.",
            f"- An LLM agent's task reads the transcript up to the turn's snapshot: at "
            f"{reads['messages']:,} messages the whole log takes {reads['whole_log_ms']:.2f} ms, "
            f"the worker's incremental read (only what was committed since the room's last "
            f"task on that worker) {reads['incremental_ms']:.2f} ms.", "",
            *prompt_budget(cost.get("prompt_budget"))]


def prompt_budget(budget: dict | None) -> list[str]:
    """The context budget check against the transcript's length."""
    if not budget:
        return []
    rows = [[f"{row['messages']:,}", f"{row['kept']:,}", f"{row['first_count_ms']:.1f}",
             f"{row['check_ms'] * 1000:.1f}", f"{row['build_ms']:.2f}"]
            for row in budget["sizes"]]
    return ["A bid prompt against the model's context window (" + budget["model"] + ", "
            f"{budget['budget_tokens']:,} tokens for the prompt, messages of about 60 tokens): "
            "each message's tokens are counted once, when the worker first reads it, and "
            "kept with a running total, so the budget check reads two totals and bisects "
            "where to cut. Building the prompt renders each message once per reader (kept "
            "for later calls). CPU of the calling thread, medians.", "",
            *table(["transcript messages", "messages that fit", "first count ms",
                    "budget check µs", "whole prompt ms"], rows), ""]


def intent_bidding(results: dict) -> list[str]:
    """Section 8: intent bidding against full bids, and streaming (benchmarks/intent.py)."""
    bench = results.get("intent")
    if not bench:
        return []
    work = bench["workload"]
    rows = [[r["agents"], r["mode"], f"{r['output_tokens_per_message']:.0f}",
             f"{r['usd_per_message'] * 1000:.3f}", f"{r['median_ms']:.0f}",
             f"{r['p95_ms']:.0f}", f"{r['first_text_ms']:.0f}" if r["first_text_ms"] else "-",
             f"{r['decision_to_first_chunk_ms']:.0f}" if r["decision_to_first_chunk_ms"]
             else "-", f"{r['cached_prompt_share']:.0%}"] for r in bench["rows"]]
    checks = [[g["agents"], f"{g['token_ratio']:.2f}", f"{g['latency_ratio']:.2f}",
               "yes" if g["same_speakers"] else "NO", verdict(g["met"])]
              for g in bench["goals"]]
    return ["## 8. Intent bidding and streaming", "",
            f"`.venv/bin/python -m benchmarks.intent`: LLM agents over HTTP on the local "
            f"stub, a full bid or a reply {work['reply_tokens']} tokens, an intent "
            f"{work['intent_tokens']}, each answer starting after {work['first_token_s']:g} s "
            f"and writing a token every {work['token_s'] * 1000:g} ms; {work['turns']} turns a "
            "room, the same scores in both modes; gpt-4o-mini list prices. Turn times skip "
            "turn 1; first text is from a turn's opening to the first words a client sees (a "
            "streamed chunk, or the whole message in full mode); decision to first chunk is "
            "from the intent phase's last answer to the reply's first chunk at the client.", "",
            *table(["N", "mode", "output tokens / message", "$ / 1000 messages",
                    "turn median ms", "turn p95 ms", "first text ms",
                    "decision to first chunk ms", "cached prompt"], rows), "",
            "Goals (issue 14, at N = 8 and 16): intent mode's output tokens per message at "
            "most 0.25 of full mode's, turn latency within 1.5x, the same speakers.", "",
            *table(["N", "output tokens intent/full", "latency intent/full", "same speakers",
                    "goal"], checks), ""]


def anatomy(results: dict) -> list[str]:
    """Where a turn's time goes, from the turn records of the N=4 and N=16 rooms."""
    rows = [[a["agents"], f"{a['decided_to_opened_ms']:.2f}", f"{a['opened_to_decided_ms']:.2f}",
             f"{a['coordinator_cpu_ms']:.2f}", f"{a['worker_cpu_ms']:.2f}", f"{a['redis_cpu_ms']:.2f}"]
            for a in results.get("turns", {}).get("anatomy", [])]
    if not rows:
        return []
    return ["## Where a turn's time goes", "",
            "From the turn records (instant agents): decided-to-opened is the commit, the next "
            "drain-and-read-state and open_turn; opened-to-decided is the fan-out, the broker "
            "hop, the worker's task and bid writes, and the coordinator's wake-ups. CPU is each "
            "process's user+system time per turn over the whole room. Medians, in ms. The "
            "profile behind these figures is in [benchmarks/README.md](README.md).", "",
            *table(["N", "decided to opened", "opened to decided", "coordinator CPU",
                    "worker CPU", "Redis CPU"], rows), ""]


def header(results: dict) -> list[str]:
    """Machine, command, date and what else was running."""
    machine = results["machine"]
    quiet = results["quiet"]
    return [
        "# parley benchmark results", "",
        f"Produced by `{results['command']}` on {results['date']} in {results['wall_s']:.0f} s.",
        "Regenerate with the same command; [benchmarks/README.md](README.md) says what each "
        "benchmark measures and how.", "",
        *table(["machine", ""], [[k, v] for k, v in machine.items()]), "",
        f"Load average before the run {quiet['before']['load']}, after it "
        f"{quiet['after']['load']} (with this run's own processes); other test runs going "
        f"on: {quiet['before']['pytest']} "
        f"before, {quiet['after']['pytest']} after. Redis: a private `redis-server` per "
        f"benchmark, `{results.get('redis_options', '')}`; coordinator, workers and Redis "
        "are separate local processes.", "", *refreshed(results.get("parts", {}))]


def refreshed(parts: dict) -> list[str]:
    """The parts measured by a later partial run (``run_all --only``), each with its run."""
    rows = [[name, f"`{run['command']}`", run["date"], run.get("cpu", "not recorded"),
             f"{run['wall_s']:.0f} s",
             f"{run['quiet']['before']['load']} / {run['quiet']['after']['load']}",
             f"{run['quiet']['before']['pytest']} / {run['quiet']['after']['pytest']}"]
            for name, run in parts.items()]
    if not rows:
        return []
    return ["Measured later, by a run of their own:", "",
            *table(["part", "command", "date", "CPU", "took", "load before / after",
                    "other test runs before / after"], rows), ""]


def render(results: dict) -> str:
    """The whole RESULTS.md."""
    sections = [header(results), targets(results), per_turn(results), anatomy(results),
                history(results), many_rooms(results), held_rooms(results), waves(results),
                takeover(results), takeover_at_scale(results),
                llm_cost(results), intent_bidding(results), worker_calls(results)]
    return "\n".join(line for section in sections for line in section).rstrip() + "\n"

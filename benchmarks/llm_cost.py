"""The LLM client's own cost, for sizing workers: CPU time per bid call through litellm
(its mock path, and a local OpenAI-compatible stub server over HTTP), the time to import
litellm, and how long a fresh worker takes to answer its first scripted and LLM bids.

    .venv/bin/python -m benchmarks.llm_cost --calls 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness import Deployment
from parley.processes import stop
from parley.shared.models import AgentSpec, Message, RoomSpec
from parley.shared.settings import get_settings

KEY_VARIABLE = "PARLEY_BENCH_STUB_KEY"
RESPOND = '{"score": 0.8, "message": "A mocked answer."}'
MOCK_KWARGS = {"mock_response": "", "mock_tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "respond", "arguments": RESPOND}}]}


def transcript(messages: int) -> list[Message]:
    """A conversation of ``messages`` short posts, the task first."""
    return [Message(seq=1, sender="User", content="Should we launch the beta next week?")] + [
        Message(seq=seq, sender=f"agent{seq % 4}", content=f"Point {seq}: one more consideration.",
                score=0.7, turn=seq - 1) for seq in range(2, messages + 1)]


def bidder(agent: AgentSpec, history: list[Message]) -> Callable[[int], None]:
    """One bid of ``agent`` through the worker's own bid code, for a call number: the
    room is the agent and one silent other; a bid that fails raises."""
    from parley.workers.calls import Call, answer_call

    room = [agent, AgentSpec(name="Other", model="scripted", script=[])]
    settings = get_settings()  # this process is the worker: it lends its keys

    def bid(turn: int) -> None:
        answer = answer_call(agent, room, Call(turn, 0), lambda: history, time.time() + 30,
                             settings=settings)
        if answer.status != "ok":
            raise RuntimeError(f"{agent.model}: the bid failed: {answer.error}")

    return bid


def call_cost(agent: AgentSpec, calls: int, history: list[Message]) -> dict[str, float]:
    """CPU (this thread only, so a stub server's threads are not counted) and wall time
    per bid, through the worker's own bid code."""
    bid = bidder(agent, history)
    bid(1)  # the first call warms up
    cpu, wall = [], []
    for turn in range(calls):
        started_cpu, started = time.thread_time(), time.perf_counter()
        bid(turn + 1)
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return {"cpu_ms": round(statistics.median(cpu), 2), "wall_ms": round(statistics.median(wall), 2)}


def per_call(calls: int, messages: int) -> dict[str, Any]:
    """Mocked and stub-served calls against a transcript of ``messages`` posts."""
    from tests.support.openai_stub import OpenAIStub, tool_call

    history = transcript(messages)
    mocked = AgentSpec(name="Mocked", model="gpt-4o-mini", litellm_kwargs=MOCK_KWARGS)
    result = {"messages": messages, "mock": call_cost(mocked, calls, history)}
    os.environ[KEY_VARIABLE] = "sk-bench"
    with OpenAIStub(api_key="sk-bench", default=tool_call(0.8, "A stub answer."),
                    keep_alive=True) as stub:  # a provider keeps connections open
        # This process is the worker: it lends the bench key to the stub.
        os.environ["PARLEY_WORKER_KEY_ENVS"] = KEY_VARIABLE
        os.environ["PARLEY_WORKER_ALLOWED_API_BASES"] = stub.url
        get_settings.cache_clear()
        served = AgentSpec(name="Served", model="openai/bench-model", api_base=stub.url,
                           api_key_env=KEY_VARIABLE)
        result["stub"] = call_cost(served, calls, history)
    return result


def prompt_budget(sizes: tuple[int, ...] = (10, 10_000), runs: int = 200) -> dict[str, Any]:
    """A bid prompt's budget check (which messages fit the model's window) and the whole
    prompt build, at each transcript size, once every message was counted (a worker counts
    each when it first reads it). gpt-4o-mini's real window and litellm's counter; CPU of
    this thread, medians in ms."""
    from parley.workers.llm import context_window, token_counter
    from parley.workers.prompts import build_prompt, fit, input_budget, participant_names

    agent = AgentSpec(name="agent0", model="gpt-4o-mini")
    room = [agent, *(AgentSpec(name=f"agent{i}", model="gpt-4o-mini") for i in range(1, 4))]
    count = token_counter(agent.model)
    budget = input_budget(context_window(agent), agent.max_tokens)
    rows = []
    for size in sizes:
        history = long_transcript(size)
        names = participant_names((a.name for a in room), history)
        started = time.thread_time()
        kept = fit(history, names, budget, count)  # the first read: counts every message
        first_ms = (time.thread_time() - started) * 1000
        check, build = [], []
        for _ in range(runs):  # a check takes microseconds: timed 100 at a time
            started = time.thread_time()
            for _ in range(100):
                fit(history, names, budget, count)
            check.append((time.thread_time() - started) * 10)
        for _ in range(runs):
            started = time.thread_time()
            build_prompt(agent, room, history, budget, count)
            build.append((time.thread_time() - started) * 1000)
        rows.append({"messages": size, "kept": len(kept[0]) + len(kept[1]),
                     "first_count_ms": round(first_ms, 1),
                     "check_ms": round(statistics.median(check), 4),
                     "build_ms": round(statistics.median(build), 3)})
    return {"model": agent.model, "budget_tokens": budget, "sizes": rows,
            "check_growth": round(rows[-1]["check_ms"] / rows[0]["check_ms"], 2)}


def long_transcript(messages: int) -> list[Message]:
    """``messages`` posts of about 60 tokens, the task first."""
    text = ("We could ship the beta to a tenth of the users first, watch the error rate for "
            "two days, and only then open it to everyone; the support team needs the notes. ")
    return [Message(seq=1, sender="User", content="Should we launch the beta next week?")] + [
        Message(seq=seq, sender=f"agent{seq % 4}", content=f"Point {seq}: {text}", score=0.7,
                turn=seq - 1) for seq in range(2, messages + 1)]


def import_seconds(runs: int = 3) -> float:
    """Median wall time of ``import litellm`` in a fresh interpreter."""
    code = "import time; t = time.perf_counter(); import litellm; print(time.perf_counter() - t)"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    times = [float(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                  capture_output=True, text=True).stdout)
             for _ in range(runs)]
    return round(statistics.median(times), 2)


def first_bid_seconds(deployment: Deployment, agent: AgentSpec, preload: bool) -> float:
    """Seconds from starting a worker to the first committed message of a waiting room
    whose agent is ``agent`` (the coordinator is already up and has fanned out)."""
    client = deployment.client()
    quiet = AgentSpec(name="Quiet", model="scripted", script=[{"score": 0.0, "message": ""}])
    spec = RoomSpec.model_validate({"name": "first-bid", "agents": [agent, quiet],
                                    "policy": {"max_messages": 2, "bid_timeout_s": 120}})
    room = client.create_room(spec)
    client.post(room, "go")
    while not client.state(room).turn_open:
        time.sleep(0.02)
    started = time.time()
    worker = deployment.group.worker("-Q", "parley.agents", env={
        "PARLEY_WORKER_PRELOAD_LITELLM": "true" if preload else "false"})
    try:
        while len(client.messages(room)) < 2:
            if time.time() - started > 120:
                raise TimeoutError("no bid within 120 s of the worker's start")
            time.sleep(0.02)
        return round(client.messages(room)[1].ts - started, 2)
    finally:
        stop(worker)


def transcript_reads(deployment: Deployment, messages: int = 1000, runs: int = 20
                     ) -> dict[str, float]:
    """A worker's transcript read at turn ``messages``: the whole log, against only the
    message committed since the room's previous task (the worker's transcript cache)."""
    from parley.shared.records import agent_message_fields
    from parley.workers.tasks import TranscriptCache

    client = deployment.client()
    store, redis = client.store, deployment.redis()
    pipe = redis.pipeline(transaction=False)
    for message in transcript(messages):
        fields = agent_message_fields(message.sender, message.content, message.score or 0.0,
                                      message.turn or 0, 1, 1, time.time())
        pipe.xadd(store.keys.log("reads"), {"seq": message.seq, **fields}, id=f"{message.seq}-0")
    pipe.execute()
    started = time.perf_counter()
    for _ in range(runs):
        store.read_messages("reads", upto_seq=messages)
    whole_ms = (time.perf_counter() - started) / runs * 1000
    increments = []
    for _ in range(runs):
        cache = TranscriptCache()
        cache.upto(store, store.keys.prefix, "reads", messages - 1)
        started = time.perf_counter()
        cache.upto(store, store.keys.prefix, "reads", messages)
        increments.append((time.perf_counter() - started) * 1000)
    return {"messages": messages, "whole_log_ms": round(whole_ms, 2),
            "incremental_ms": round(statistics.median(increments), 2)}


def start_up() -> dict[str, Any]:
    """A fresh worker's time to its first scripted bid and to its first LLM bid, and the
    cost of a worker's transcript read late in a long room."""
    scripted = AgentSpec(name="Scripted", model="scripted", script=[{"score": 0.9, "message": "hi"}])
    mocked = AgentSpec(name="Mocked", model="gpt-4o-mini", litellm_kwargs=MOCK_KWARGS)
    with Deployment() as deployment:
        deployment.group.coordinator()
        return {
            "first_scripted_bid_s": first_bid_seconds(deployment, scripted, preload=False),
            "first_llm_bid_s": first_bid_seconds(deployment, mocked, preload=True),
            "transcript_read": transcript_reads(deployment),
        }


def run(calls: int) -> dict[str, Any]:
    """Every measurement of this module."""
    return {"import_litellm_s": import_seconds(), "worker": start_up(),
            "prompt_budget": prompt_budget(runs=max(20, calls)),
            "per_call": [per_call(calls, 1), per_call(calls, 1000)]}


def main(argv: list[str] | None = None) -> None:
    """Run from the command line and print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    print(json.dumps(run(parser.parse_args(argv).calls), indent=1))


if __name__ == "__main__":
    main()

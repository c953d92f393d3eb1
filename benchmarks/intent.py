"""Two-phase bidding against full bids, and streaming: output tokens and dollars per posted
message, turn latency, and how soon a client sees a reply's first words, for rooms of N
agents in ``bid_mode: full`` and ``bid_mode: intent``.

    .venv/bin/python -m benchmarks.intent --agents 4,8,16 --turns 6

Agents are real LLM agents (litellm over HTTP, streaming) on the OpenAI-compatible stub of
tests/support, answering realistic lengths at a realistic pace: a full bid writes a
200-token message, an intent 20 tokens, the winner's reply 200 tokens; every answer starts
after ``FIRST_TOKEN_S`` and writes a token every ``TOKEN_S``. Scores follow the benchmark
rotation (agent t mod N bids 0.9, the others 0.2) in both modes, so both must post the same
speakers. Prices are gpt-4o-mini's list prices, set on the agents.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from benchmarks.harness import Deployment, RoomRun, expect_rotation, summary, turn_times_ms
from parley.shared.events import AnswerArrived, MessageChunk, TurnOpened
from parley.shared.models import CallKind, Message, RoomSpec
from tests.support.openai_stub import OpenAIStub, raw_arguments, text, tool_call

KEY_VARIABLE = "PARLEY_BENCH_STUB_KEY"
FIRST_TOKEN_S = 0.2
TOKEN_S = 0.01  # 100 tokens a second
REPLY_TOKENS = 200
INTENT_TOKENS = 20
PRICES = {"input_cost_per_token": 0.15e-6, "output_cost_per_token": 0.60e-6}
WORKER_CONCURRENCY = 64
# Goals of the issue: at N >= 8, intent mode pays at most a quarter of full mode's output
# tokens per posted message, and its turn latency stays within 1.5x of full mode's.
TOKEN_GOAL = 0.25
LATENCY_GOAL = 1.5


def words(tokens: int, label: str) -> str:
    """About ``tokens`` tokens of text (the stub counts four characters a token)."""
    return (f"{label}: " + "lorem ipsum dolor sit amet " * tokens)[: tokens * 4].rstrip()


def intent(score: float, line: str) -> Any:
    return raw_arguments(json.dumps({"score": score, "intent": line}), delay_s=FIRST_TOKEN_S,
                         token_s=TOKEN_S, completion_tokens=INTENT_TOKENS)


def script(stub: OpenAIStub, mode: str, agents: int, turns: int, tag: str) -> None:
    """Each agent's answers, turn by turn: the rotation's scores, and (intent mode) the
    winner's reply right after its intent."""
    for index in range(agents):
        replies = []
        for turn in range(1, turns + 1):
            wins = turn % agents == index
            score = 0.9 if wins else 0.2
            if mode == "full":
                replies.append(tool_call(score, words(REPLY_TOKENS, f"agent{index} turn {turn}"),
                                         delay_s=FIRST_TOKEN_S, token_s=TOKEN_S,
                                         completion_tokens=REPLY_TOKENS))
                continue
            replies.append(intent(score, words(INTENT_TOKENS, f"agent{index} would say")))
            if wins:
                replies.append(text(words(REPLY_TOKENS, f"agent{index} turn {turn}"),
                                    delay_s=FIRST_TOKEN_S, token_s=TOKEN_S,
                                    completion_tokens=REPLY_TOKENS))
        stub.script(f"{tag}-agent{index}", *replies)


def room_spec(stub: OpenAIStub, mode: str, agents: int, turns: int, tag: str) -> RoomSpec:
    return RoomSpec.model_validate({
        "name": f"intent-bench-{mode}-{agents}",
        "policy": {"kind": "bid", "bid_mode": mode, "max_messages": turns + 1,
                   "bid_timeout_s": 60},
        "agents": [{"name": f"agent{i}", "model": f"openai/{tag}-agent{i}",
                    "api_base": stub.url, "api_key_env": KEY_VARIABLE,
                    "litellm_kwargs": PRICES} for i in range(agents)],
    })


def run_mode(deployment: Deployment, stub: OpenAIStub, mode: str, agents: int, turns: int
             ) -> dict[str, Any]:
    """One room of ``agents`` in ``mode`` for ``turns`` turns, and what it cost."""
    tag = f"{mode}{agents}"
    script(stub, mode, agents, turns, tag)
    client = deployment.client()
    seen: dict[tuple[str, int], float] = {}  # ("chunk"|"message", turn) -> first seen at

    def on_chunk(chunk: MessageChunk) -> None:
        seen.setdefault(("chunk", chunk.turn), time.time())

    def on_message(message: Message) -> None:
        if message.turn is not None:
            seen.setdefault(("message", message.turn), time.time())

    result = client.run(room_spec(stub, mode, agents, turns, tag), "Benchmark: take turns.",
                        timeout_s=600, on_message=on_message, on_chunk=on_chunk)
    messages = result.messages
    run = RoomRun(result.room, turn_times_ms([m.ts for m in messages]),
                  [m.sender for m in messages[1:]])
    expect_rotation(run, agents, turns)
    records = client.turns(result.room)
    events = list(client.events(result.room, follow=False))
    posted = len(messages) - 1
    first_text, decision_to_chunk = [], []
    for turn in range(2, turns + 1):  # turn 1 includes the room's pick-up
        opened = next(e.ts for e in events if isinstance(e, TurnOpened) and e.turn == turn)
        shown = seen.get(("chunk", turn), seen.get(("message", turn)))
        if shown is not None:
            first_text.append((shown - opened) * 1000)
        intents = [e.ts for e in events if isinstance(e, AnswerArrived) and e.turn == turn
                   and e.kind is CallKind.INTENT]
        if mode == "intent" and ("chunk", turn) in seen and intents:
            decision_to_chunk.append((seen[("chunk", turn)] - max(intents)) * 1000)
    completion = sum(r.completion_tokens for r in records)
    prompt = sum(r.prompt_tokens for r in records)
    cached = sum(r.cached_tokens for r in records)
    cost = sum(r.cost_usd for r in records)
    row = {
        "mode": mode, "agents": agents, "posted": posted, "speakers": run.speakers,
        "output_tokens_per_message": round(completion / posted, 1),
        "prompt_tokens_per_message": round(prompt / posted, 1),
        "cached_prompt_share": round(cached / prompt, 3) if prompt else 0.0,
        "usd_per_message": round(cost / posted, 7),
        **summary(run.turn_ms),
        "first_text_ms": round(statistics.median(first_text), 1) if first_text else None,
        "decision_to_first_chunk_ms": (round(statistics.median(decision_to_chunk), 1)
                                       if decision_to_chunk else None),
        "chunks_per_reply": round(sum(isinstance(e, MessageChunk) for e in events) / posted, 1),
    }
    print(f"{mode:>6} N={agents:>2} out/msg={row['output_tokens_per_message']:7.1f} "
          f"$/msg={row['usd_per_message']:.7f} turn={row['median_ms']:8.1f} ms "
          f"first text={row['first_text_ms']} ms decision->chunk="
          f"{row['decision_to_first_chunk_ms']} ms", flush=True)
    return row


def goals(rows: list[dict]) -> list[dict]:
    """Per N: intent/full ratios of output tokens per message and of turn latency, the same
    speakers in both modes, and whether the issue's goals hold (checked at N >= 8)."""
    checks = []
    for agents in sorted({row["agents"] for row in rows}):
        full = next(r for r in rows if r["agents"] == agents and r["mode"] == "full")
        two = next(r for r in rows if r["agents"] == agents and r["mode"] == "intent")
        tokens = two["output_tokens_per_message"] / full["output_tokens_per_message"]
        latency = two["median_ms"] / full["median_ms"]
        checks.append({"agents": agents, "token_ratio": round(tokens, 3),
                       "latency_ratio": round(latency, 3),
                       "same_speakers": two["speakers"] == full["speakers"],
                       "met": agents < 8 or (tokens <= TOKEN_GOAL and latency <= LATENCY_GOAL
                                             and two["speakers"] == full["speakers"])})
    return checks


def run(sizes: list[int], turns: int) -> dict[str, Any]:
    """Both modes for every size, on one private deployment and one stub."""
    with OpenAIStub(api_key="sk-bench", prefix_cache=True) as stub, Deployment(env={
            KEY_VARIABLE: "sk-bench", "PARLEY_WORKER_KEY_ENVS": KEY_VARIABLE,
            "PARLEY_WORKER_ALLOWED_API_BASES": stub.url,
            "PARLEY_WORKER_PRELOAD_LITELLM": "true"}) as deployment:
        deployment.group.worker("-c", str(WORKER_CONCURRENCY))
        deployment.group.coordinator()
        rows = [run_mode(deployment, stub, mode, agents, turns)
                for agents in sizes for mode in ("full", "intent")]
    return {"workload": {"turns": turns, "first_token_s": FIRST_TOKEN_S, "token_s": TOKEN_S,
                         "reply_tokens": REPLY_TOKENS, "intent_tokens": INTENT_TOKENS,
                         "prices": PRICES},
            "rows": [{k: v for k, v in row.items() if k != "speakers"} for row in rows],
            "goals": goals(rows)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="4,8,16", help="room sizes, comma-separated")
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args(argv)
    results = run([int(n) for n in args.agents.split(",")], args.turns)
    print(json.dumps(results["goals"], indent=1))


if __name__ == "__main__":
    main()

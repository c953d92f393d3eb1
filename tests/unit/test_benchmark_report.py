"""RESULTS.md's Targets table: every scale target has its row, met or missed by its figure."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import report, run_all


def target_rows(results: dict) -> dict[str, str]:
    """The Targets table's rows of ``results``: each target's text to its verdict."""
    lines = report.targets(results)[4:-1]
    return {line.split(" | ")[0].lstrip("| "): line.rsplit(" | ", 1)[1].rstrip(" |")
            for line in lines}


def sleeping_row(agents: int, median: float, p95: float) -> dict:
    return {"agents": agents, "sleep_s": 0.05, "median_ms": 55.0, "added_median_ms": median,
            "added_p95_ms": p95}


def test_a_run_that_measured_nothing_still_lists_every_target_as_not_met():
    rows = target_rows({})

    assert len(rows) == 6
    assert set(rows.values()) == {"**missed**"}


def test_the_time_over_the_slowest_call_is_missed_when_its_p95_is_over_twice_its_median():
    rows = target_rows({"turns": {"runs": [sleeping_row(4, 2.0, 3.9), sleeping_row(16, 2.0, 4.1),
                                           sleeping_row(40, 6.5, 7.0)]}})

    verdicts = {agents: next(v for k, v in rows.items() if k.startswith(f"N={agents}, 50 ms"))
                for agents in (4, 16, 40)}
    assert verdicts == {4: "met", 16: "**missed**", 40: "**missed**"}


def test_held_rooms_and_takeover_are_met_only_with_no_lease_lost_and_nothing_committed_twice():
    held = {"rooms": 10_000, "minutes": 10, "peak_rss_mb": 500.0, "coordinator_peak_rss_mb": 440.0,
            "keeper_peak_rss_mb": 60.0, "leased_s": 40.0, "lease_churn": 0,
            "rooms_without_lease": 0, "turns": 1000, "forced_gcs": 10, "gc_max_s": 0.5}
    takeover = {"rooms": 1000, "lease_ttl_s": 5.0, "committed_again": 1000, "median_s": 5.5,
                "max_s": 7.9, "duplicates": 0}

    met = target_rows({"ten_thousand_rooms": held, "takeover_at_scale": takeover})
    missed = target_rows({"ten_thousand_rooms": {**held, "lease_churn": 1},
                          "takeover_at_scale": {**takeover, "duplicates": 1}})

    def verdict(rows: dict[str, str], start: str) -> str:
        return next(v for k, v in rows.items() if k.startswith(start))

    assert (verdict(met, "10,000 rooms"), verdict(met, "Takeover")) == ("met", "met")
    assert (verdict(missed, "10,000 rooms"), verdict(missed, "Takeover")) == (
        "**missed**", "**missed**")


def test_only_names_the_suite_parts_and_refuses_others_by_name():
    assert run_all.parts("ten_thousand_rooms, takeover_at_scale") == [
        "ten_thousand_rooms", "takeover_at_scale"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown part tenk"):
        run_all.parts("turns,tenk")


def test_a_part_measured_later_names_the_cpu_it_ran_on_or_says_it_was_not_recorded():
    quiet = {"before": {"load": "0.1", "pytest": 0}, "after": {"load": "0.2", "pytest": 0}}
    run = {"command": "python -m benchmarks.run_all --only takeover_at_scale",
           "date": "2026-12-07 23:50 UTC", "wall_s": 80.0, "quiet": quiet}
    lines = report.refreshed({"takeover_at_scale": {**run, "cpu": "2 x Intel(R) Xeon(R)"},
                              "worker_calls": run})

    assert "| CPU |" in lines[2]
    assert "| 2 x Intel(R) Xeon(R) |" in lines[4]
    assert "| not recorded |" in lines[5]

"""The verdict of ``bench_gram.py --signing`` (pure: synthetic figures, nothing timed).

The benchmark is a checker of the issue's targets, so it must say MISSED when signing
costs too much, and must refuse a "signed" round whose client did not sign."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_gram_signing import check_mode, summarize, verdict_lines  # noqa: E402


def _round(rate: float, active_ms: float, serializer: str = "json") -> dict:
    return {"rate": rate, "active": [active_ms / 1e3] * 5, "trip": 0.01,
            "cpu_per_job": 0.02, "refused": {}, "serializer": serializer,
            "cpu_by_group": {"client": 0.002, "node": 0.01}, "load": 1.0}


def _verdict(signed_rate: float, signed_ms: float) -> dict:
    rounds = {"unsigned": [_round(100, 40), _round(100, 40)],
              "signed": [_round(signed_rate, signed_ms, "auth")] * 2}
    return summarize(rounds)


def test_within_targets_is_met() -> None:
    summary = _verdict(signed_rate=85, signed_ms=48)
    assert summary["verdict"] == {"throughput": True, "latency": True}
    assert summary["ratios"]["rate"] == pytest.approx(0.85)
    assert summary["ratios"]["active_p50"] == pytest.approx(1.2)


def test_slow_signed_throughput_is_missed() -> None:
    assert _verdict(signed_rate=79, signed_ms=40)["verdict"]["throughput"] is False


def test_slow_signed_latency_is_missed() -> None:
    assert _verdict(signed_rate=100, signed_ms=51)["verdict"]["latency"] is False


def test_medians_of_rounds_and_pooled_latency() -> None:
    rounds = {"unsigned": [_round(50, 40), _round(70, 40), _round(60, 40)],
              "signed": [_round(30, 10, "auth"), _round(55, 60, "auth"),
                         _round(58, 60, "auth")]}
    summary = summarize(rounds)
    assert summary["unsigned"]["rate"] == 60 and summary["signed"]["rate"] == 55
    assert summary["signed"]["active_p50"] == pytest.approx(0.060)


@pytest.mark.parametrize("mode,serializer", [("signed", "json"), ("unsigned", "auth")])
def test_a_round_in_the_wrong_mode_is_refused(mode: str, serializer: str) -> None:
    with pytest.raises(SystemExit, match="not"):
        check_mode({"serializer": serializer}, mode, 0)
    check_mode({"serializer": "auth" if mode == "signed" else "json"}, mode, 0)


def test_rounds_that_disagree_are_flagged_as_noise() -> None:
    quiet = _verdict(signed_rate=90, signed_ms=44)["noise"]
    assert quiet == {"rate": 1.0, "active_p50": 1.0}
    rounds = {"unsigned": [_round(50, 40), _round(100, 80)],
              "signed": [_round(60, 50, "auth"), _round(66, 55, "auth")]}
    assert summarize(rounds)["noise"] == {"rate": 2.0, "active_p50": 2.0}


def test_verdict_lines_say_missed_and_noisy() -> None:
    rounds = {"unsigned": [_round(50, 40), _round(100, 80)],
              "signed": [_round(40, 90, "auth"), _round(44, 95, "auth")]}
    text = "\n".join(verdict_lines(summarize(rounds)))
    assert "target >= 80%): MISSED" in text and "target <= 1.25x): MISSED" in text
    assert text.count("NOISY") == 1
    quiet = "\n".join(verdict_lines(_verdict(signed_rate=90, signed_ms=44)))
    assert quiet.count("MET") == 2 and "NOISY" not in quiet

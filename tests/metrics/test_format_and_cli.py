"""Text format round trip, iteration recording rules, and ``grid-tasks metrics``."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest
import redis
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from grid_tasks.cli import main
from grid_tasks.embedded.redis_server import free_port
from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.errors import GridTasksError
from grid_tasks.metrics import MetricFamily, read_iterations, record_iteration, render


def test_render_round_trips_through_the_prometheus_parser():
    odd = 'say "hi"\\ \nnext'
    fams = [MetricFamily("demo_total", "counter", "A help\nwith a newline.").add(3, who=odd),
            MetricFamily("demo_seconds", "histogram", "Durations.")
            .add_histogram([(0.5, 1), (float("inf"), 2)], 2, 1.25, rm="rmA"),
            MetricFamily("demo_ratio", "gauge", "No labels.").add(0.25)]
    parsed = {f.name: f for f in text_string_to_metric_families(render(fams))}
    assert parsed["demo"].samples[0].labels == {"who": odd}
    assert parsed["demo"].samples[0].value == 3
    assert parsed["demo"].documentation == "A help\nwith a newline."
    hist = {(s.name, s.labels.get("le")): s.value for s in parsed["demo_seconds"].samples}
    assert hist == {("demo_seconds_bucket", "0.5"): 1, ("demo_seconds_bucket", "+Inf"): 2,
                    ("demo_seconds_sum", None): 1.25, ("demo_seconds_count", None): 2}
    assert parsed["demo_ratio"].samples[0].value == 0.25


def test_record_iteration_buckets_are_cumulative_and_bad_samples_refused(settings):
    client = redis.Redis.from_url(settings.redis_url)
    for seconds in (0.004, 0.2, 0.2, 45.0):
        record_iteration(client, "rmB", seconds)
    (stats,) = read_iterations(client)
    by_bound = dict(stats.buckets)
    assert (by_bound[0.005], by_bound[0.1], by_bound[0.25], by_bound[30.0],
            by_bound[60.0], by_bound[float("inf")]) == (1, 1, 3, 3, 4, 4)
    assert stats.count == 4 and stats.sum == pytest.approx(45.404) and stats.last == 45.0
    for bad in (-1.0, float("nan"), "3"):
        with pytest.raises(GridTasksError, match="record_iteration"):
            record_iteration(client, "rmB", bad)
    assert read_iterations(client)[0].count == 4
    client.close()


def test_iteration_histogram_written_by_an_earlier_version_keeps_its_counts(settings):
    """Earlier versions kept cumulative ``le:`` fields; new samples add to them."""
    client = redis.Redis.from_url(settings.redis_url)
    client.hset("grid_tasks:metrics:iteration:rmC", mapping={
        "le:0.01": 1, "le:0.025": 1, "le:0.05": 2, **{f"le:{b}": 2 for b in (
            "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf")},
        "count": 2, "sum": 0.047, "last": "0.04"})
    client.sadd("grid_tasks:metrics:iteration:rms", "rmC")
    record_iteration(client, "rmC", 0.02)
    stats = next(s for s in read_iterations(client) if s.rm == "rmC")
    by_bound = dict(stats.buckets)
    assert (by_bound[0.005], by_bound[0.01], by_bound[0.025], by_bound[0.05],
            by_bound[float("inf")]) == (0, 1, 2, 3, 3)
    assert stats.count == 3 and stats.sum == pytest.approx(0.067) and stats.last == 0.02
    client.close()


def test_show_json_and_table(grid_settings):
    client = redis.Redis.from_url(grid_settings.redis_url)
    record_iteration(client, "rmA", 0.2)
    client.close()
    env = grid_settings.to_env()
    result = CliRunner().invoke(main, ["metrics", "show", "--json"], env=env)
    assert result.exit_code == 0, result.output
    fams = {f["name"]: f for f in json.loads(result.output)}
    counts = [s for s in fams["grid_tasks_iteration_duration_seconds"]["samples"]
              if s["name"].endswith("_count")]
    assert counts == [{"name": "grid_tasks_iteration_duration_seconds_count",
                       "labels": {"rm": "rmA"}, "value": 1.0}]
    table = CliRunner().invoke(main, ["metrics", "show"], env=env)
    assert table.exit_code == 0 and "grid_tasks_iteration_duration_seconds_count" in table.output


def test_serve_command_answers_scrapes(grid_settings, grid_env, tmp_path):
    port = free_port()
    proc = subprocess.Popen(grid_tasks_command("metrics", "serve", "--port", str(port)),
                            env=grid_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert f"serving http://127.0.0.1:{port}/metrics" in proc.stdout.readline().decode()
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "metrics serve never answered"
                time.sleep(0.1)
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"grid_tasks_queue_messages", "grid_tasks_maui_jobs", "grid_tasks_nodes"} <= names
    finally:
        proc.terminate()
        proc.wait(10)

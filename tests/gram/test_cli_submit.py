"""``grid-tasks submit`` against a live grid, as a user would run it."""

from __future__ import annotations

import json
import signal
import subprocess

from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.embedded.stack import grid_tasks_command


def _invoke(module_grid, *args: str):
    """In-process (fast); the grid's settings reach Grid() through the environment."""
    runner = CliRunner()
    return runner.invoke(main, ["submit", *args], env=module_grid.settings.to_env(),
                         catch_exceptions=False)


def test_batch_mode_prints_the_contact_from_a_real_command(module_grid):
    batch = subprocess.run(grid_tasks_command("submit", "-r", "rmA", "-b",
                                              "&(executable=/bin/true)"),
                           env=module_grid.env, capture_output=True, text=True, timeout=60)
    assert batch.returncode == 0, batch.stderr
    contact = batch.stdout.strip()
    assert contact.startswith("gram://rmA/jobs/")
    assert module_grid.grid.job(contact).wait(timeout=30).state.value == "DONE"


def test_stream_json_and_exit_codes(module_grid, tmp_path):
    rsl = tmp_path / "job.rsl"
    rsl.write_text("&(executable=/bin/sh)(arguments=-c 'echo out; echo err >&2; exit 3')")
    streamed = _invoke(module_grid, "-r", "rmA", "-s", "-f", str(rsl))
    assert streamed.exit_code == 3
    assert streamed.stdout.startswith("out\n") and "err" in streamed.stderr
    assert "DONE (exit code 3)" in streamed.stdout

    as_json = _invoke(module_grid, "-r", "rmB", "--json", "&(executable=/bin/echo)(arguments=x)")
    assert as_json.exit_code == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["state"] == "DONE" and data["rm"] == "rmB" and data["exit_codes"] == {"0": 0}


def test_refusals_are_one_line_errors(module_grid, tmp_path):
    bad = _invoke(module_grid, "-r", "rmA", "&(executable=/bin/true)(count=zero)")
    assert bad.exit_code == 1 and "error" in bad.stderr and "^" in bad.stderr
    assert "Traceback" not in bad.stderr
    unknown = _invoke(module_grid, "-r", "nowhere", "&(executable=/bin/true)")
    assert unknown.exit_code == 1 and "nowhere" in unknown.stderr and "rmA" in unknown.stderr
    huge = _invoke(module_grid, "-r", "rmB", "&(executable=/bin/true)(count=50)")
    assert huge.exit_code == 1 and "can never run" in huge.stderr
    missing = _invoke(module_grid, "-r", "rmA", f"&(executable={tmp_path}/none)")
    assert missing.exit_code == 1 and "EXECUTABLE_NOT_FOUND" in missing.stderr
    conflict = _invoke(module_grid, "-r", "rmA",
                       "&(executable=/bin/true)(resourceManagerContact=rmB)")
    assert conflict.exit_code == 1
    assert "resourceManagerContact=rmB but was sent to rmA" in conflict.stderr
    greedy = _invoke(module_grid, "-r", "rmA", "&(executable=/bin/true)(maxMemory=999999)")
    assert greedy.exit_code == 1, greedy.stdout
    assert "999999 MB (maxMemory) and its largest node has 4096 MB" in greedy.stderr
    neither = _invoke(module_grid)
    assert neither.exit_code == 2 and "exactly one" in neither.stderr


def _interrupted(module_grid, *args: str, ready: str) -> tuple[str, str, str, int]:
    """Run ``grid-tasks ARGS`` until its stdout shows ``ready``, then Ctrl-C it:
    (first stderr line, stdout, rest of stderr, exit status)."""
    proc = subprocess.Popen(grid_tasks_command(*args), env=module_grid.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stderr.readline()  # the contact, before any output of the job
        out = proc.stdout.readline()
        assert ready in out, (first, out, proc.stderr.read())
        proc.send_signal(signal.SIGINT)
        rest_out, rest_err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return first.strip(), out + rest_out, rest_err, proc.returncode


def test_ctrl_c_cancels_the_streamed_job_and_output_reads_it_after(module_grid):
    contact, out, err, code = _interrupted(
        module_grid, "submit", "-r", "rmA", "-s",
        "&(executable=/bin/sh)(arguments=-c 'echo started; echo oops >&2; sleep 60')",
        ready="started")
    assert contact.startswith("gram://rmA/jobs/") and out == "started\n"
    assert code == 130 and f"{contact}: interrupted, the job is cancelled" in err
    status = module_grid.grid.job(contact).wait(timeout=30)
    assert status.state.value == "FAILED" and status.gram_error == "USER_CANCELLED"
    # globus-job-get-output: the output after the fact, by contact or id
    runner, env = CliRunner(), module_grid.settings.to_env()
    got = runner.invoke(main, ["output", contact], env=env, catch_exceptions=False)
    assert got.exit_code == 0 and got.stdout == "started\n"
    job_id = contact.rsplit("/", 1)[1]
    errs = runner.invoke(main, ["output", job_id, "--stderr", "--json"], env=env)
    data = json.loads(errs.stdout)
    assert (data["state"], data["stream"]) == ("FAILED", "stderr")
    assert [(x["text"], x["rank"]) for x in data["lines"]] == [("oops\n", 0)]
    unknown = runner.invoke(main, ["output", "987654"], env=env)
    assert unknown.exit_code == 1 and "987654" in unknown.stderr


COALLOC = ("+(&(resourceManagerContact=rmA)(label=a)(subjobStartType=no-barrier)"
           "(executable=/bin/sh)(arguments=-c 'echo from-a; {a}'))"
           "(&(resourceManagerContact=rmB)(label=b)(subjobStartType=no-barrier)"
           "(executable=/bin/sh)(arguments=-c 'echo from-b >&2; {b}'))")


def test_coalloc_submit_streams_labelled_output_and_ctrl_c_cancels(module_grid):
    done = CliRunner().invoke(main, ["coalloc", "submit", "-s",
                                     COALLOC.format(a="true", b="true")],
                              env=module_grid.settings.to_env(), catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "[a] from-a\n" in done.stdout and "[b] from-b\n" in done.stderr
    assert done.stderr.startswith("duroc://coalloc/")
    contact, out, err, code = _interrupted(
        module_grid, "coalloc", "submit", "-s", COALLOC.format(a="sleep 60", b="sleep 60"),
        ready="[a] from-a")
    assert contact.startswith("duroc://coalloc/") and code == 130
    assert f"{contact}: interrupted, the job is cancelled" in err
    assert module_grid.grid.coalloc(contact).status().state.value == "FAILED"

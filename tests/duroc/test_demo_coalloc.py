"""The coallocated demo job fits the demo grid and is a valid multi-request."""

from __future__ import annotations

from pathlib import Path

from grid_tasks.embedded.demo_coalloc import demo_rsl
from grid_tasks.rsl import lower
from grid_tasks.settings import default_config_file
from grid_tasks.topology import load_topology


def test_demo_job_spans_both_demo_rms_and_fits_them():
    subs = lower(demo_rsl(Path("/tmp/program.py")))
    topo = load_topology(default_config_file("demo-grid.toml"))
    assert [(s.rm_contact, s.label, s.count) for s in subs] == [("rmA", "left", 2),
                                                                 ("rmB", "right", 3)]
    for sub in subs:
        assert sub.count <= sum(n.procs for n in topo.rm(sub.rm_contact).nodes)
        assert "resourceManagerContact" not in sub.gram_rsl()

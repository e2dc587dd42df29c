"""Beat prunes each Slurm RM's late releases, and no native RM's (their iteration does)."""

from __future__ import annotations

from celery.beat import Service

from grid_tasks.broker.remote import PRUNE
from grid_tasks.scheduling.rm_tasks import PRUNE_EVERY_S, _slurm_prune_schedule


def test_beat_prunes_every_slurm_rm_and_no_native_one(settings, celery_app_factory, tmp_path):
    (tmp_path / "grid.toml").write_text(
        '[rm.rmA]\n[rm.rmA.node.node1]\nprocs = 2\n'
        '[rm.rmS]\nkind = "slurm"\nslurm_conf = "/etc/slurm/s.conf"\n')
    app = celery_app_factory(settings.replace(topology_file=tmp_path / "grid.toml"))
    service = Service(app, schedule_filename=str(tmp_path / "beat-schedule"))
    try:
        _slurm_prune_schedule(sender=service)
        ours = {k: v for k, v in service.scheduler.schedule.items() if k.startswith(PRUNE)}
        assert list(ours) == [f"{PRUNE}[rmS]"]
        entry = ours[f"{PRUNE}[rmS]"]
        assert entry.kwargs == {"rm": "rmS"} and entry.options["shadow"] == "prune on rmS"
        assert entry.schedule.run_every.total_seconds() == PRUNE_EVERY_S
    finally:
        service.stop()

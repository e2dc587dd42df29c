"""Chord pitfalls that need no workers: routing of header, body, errback, accumulate."""

from __future__ import annotations

import grid_tasks.duroc.tasks  # noqa: F401 - registers DUROC's tasks on every app
from grid_tasks.celery_app import create_app


def test_header_goes_to_the_gatekeeper_and_the_rest_to_the_scheduler(settings):
    from grid_tasks import effects as tasks

    app = create_app(settings)
    try:
        route = app.amqp.router.route
        watch = tasks.watch_signature(app, 7, 1, "rmB", 0.0)
        assert route(watch.options, watch.task, (), watch.kwargs)["queue"].name == "gram.rmB"
        for sig in (tasks.release_signature(app, 7), tasks.failed_signature(app, 7)):
            assert route(sig.options, sig.task, (), sig.kwargs)["queue"].name == "scheduler"
        for helper in ("celery.accumulate", "celery.chord_unlock"):
            assert route({}, helper, (), {})["queue"].name == "scheduler"
    finally:
        app.close()


def test_every_part_of_the_chord_has_a_readable_name_in_flower(settings):
    from grid_tasks import effects as tasks

    app = create_app(settings)
    try:
        shown = {sig.task: sig.options["shadow"] for sig in (
            tasks.watch_signature(app, 7, 1, "rmB", 0.0), tasks.release_signature(app, 7),
            tasks.failed_signature(app, 7), tasks.settle_signature(app, 7))}
        assert shown == {tasks.WATCH: "duroc-watch job coalloc-7/1 on rmB",
                         tasks.RELEASE: "duroc-release job coalloc-7",
                         tasks.FAILED: "duroc-failed job coalloc-7",
                         tasks.SETTLE: "duroc-settle job coalloc-7"}
    finally:
        app.close()


def test_errback_is_old_style_so_celery_sends_it_through_the_router(settings):
    """Celery calls (request, exc, tb) errbacks INLINE in the failing worker, ignoring
    routing; one taking only the task id is sent as a task instead."""
    from grid_tasks import effects as tasks

    app = create_app(settings)
    try:
        errback = tasks.failed_signature(app, 7)
        errback._app = app
        assert not app.backend._errback_arity_greater(errback, 1)
    finally:
        app.close()


DOOR = ("request", "add_subjobs", "delete_subjob", "release_barrier", "cancel")


def test_the_door_is_the_scheduler_queue_and_users_may_knock(settings):
    """A coallocated job spans RMs: its requests go to the scheduler queue, users may
    send them; what the scheduler then does on their behalf stays its own."""
    from grid_tasks import effects as tasks
    from grid_tasks.duroc.door import SUBMIT_SUBJOB
    from grid_tasks.security.roles import Role, roles_for

    app = create_app(settings)
    try:
        for name in DOOR:
            task = f"grid_tasks.duroc.tasks.{name}"
            assert app.amqp.router.route({}, task, (), {"job": 7})["queue"].name == "scheduler"
            assert task in app.tasks
            assert roles_for(task) == {Role.USER, Role.SCHEDULER}
        for task in (tasks.RELEASE, tasks.FAILED, tasks.WATCH, SUBMIT_SUBJOB):
            assert roles_for(task) == {Role.SCHEDULER}, task
        watch = tasks.watch_signature(app, 7, 1, "rmB", 0.0, submitter="/CN=alice")
        assert watch.kwargs["submitter"] == "/CN=alice"
    finally:
        app.close()

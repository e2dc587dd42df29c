"""Chord pitfalls that need no workers: routing of header, body, errback, accumulate."""

from __future__ import annotations

from grid_tasks.celery_app import create_app


def test_header_goes_to_the_gatekeeper_and_the_rest_to_the_scheduler(settings):
    from grid_tasks.duroc import tasks

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


def test_errback_is_old_style_so_celery_sends_it_through_the_router(settings):
    """Celery calls (request, exc, tb) errbacks INLINE in the failing worker, ignoring
    routing; one taking only the task id is sent as a task instead."""
    from grid_tasks.duroc import tasks

    app = create_app(settings)
    try:
        errback = tasks.failed_signature(app, 7)
        errback._app = app
        assert not app.backend._errback_arity_greater(errback, 1)
    finally:
        app.close()

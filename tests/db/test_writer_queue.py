"""SQLite writers queue on a file lock: taken at the first write, released at commit or
rollback, urgent writers (the scheduling iteration) first, SQLite's own timeout last."""

from __future__ import annotations

import fcntl
import os
import threading
import time

from sqlalchemy import text

import grid_tasks.db.engine as engine_mod
from grid_tasks.db.engine import make_engine, write_priority


def _engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'q.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT)"))
    return engine


def _lock_free(tmp_path) -> bool:
    fd = os.open(tmp_path / "q.db-writer.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_lock_spans_first_write_to_commit_or_rollback(tmp_path):
    engine = _engine(tmp_path)
    with engine.connect() as conn:
        conn.execute(text("SELECT count(*) FROM t"))
        assert _lock_free(tmp_path)  # reads take nothing
        conn.execute(text("INSERT INTO t (who) VALUES ('a')"))
        assert not _lock_free(tmp_path)
        conn.commit()
        assert _lock_free(tmp_path)
        conn.execute(text("UPDATE t SET who = 'b'"))
        assert not _lock_free(tmp_path)
        conn.rollback()
        assert _lock_free(tmp_path)
        conn.execute(text("DELETE FROM t"))
    assert _lock_free(tmp_path)  # returned to the pool: reset by rollback
    engine.dispose()


def test_concurrent_writers_all_land(tmp_path):
    engine = _engine(tmp_path)

    def writer(name: str) -> None:
        for _ in range(50):
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO t (who) VALUES (:w)"), {"w": name})

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 200
    engine.dispose()


def test_an_urgent_writer_goes_before_waiting_ordinary_ones(tmp_path):
    engine = _engine(tmp_path)
    holder = engine.connect()
    holder.execute(text("INSERT INTO t (who) VALUES ('holder')"))  # holds the lock

    def write(who: str, urgent: bool) -> None:
        with engine.begin() as conn:
            if urgent:
                with write_priority():
                    conn.execute(text("INSERT INTO t (who) VALUES (:w)"), {"w": who})
            else:
                conn.execute(text("INSERT INTO t (who) VALUES (:w)"), {"w": who})

    ordinary = threading.Thread(target=write, args=("ordinary", False))
    ordinary.start()
    time.sleep(0.2)  # the ordinary writer is polling first
    urgent = threading.Thread(target=write, args=("urgent", True))
    urgent.start()
    deadline = time.monotonic() + 30
    probe = engine_mod._WriterQueue(str(tmp_path / "q.db"))
    while not probe._urgent_waiting() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert probe._urgent_waiting()
    holder.commit()
    holder.close()
    ordinary.join(timeout=30)
    urgent.join(timeout=30)
    with engine.connect() as conn:
        order = [w for (w,) in conn.execute(text("SELECT who FROM t ORDER BY id"))]
    assert order == ["holder", "urgent", "ordinary"]
    engine.dispose()


def test_a_lock_held_too_long_leaves_it_to_sqlite(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_mod, "WRITER_WAIT_S", 0.2)
    engine = _engine(tmp_path)
    stranger = os.open(tmp_path / "q.db-writer.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(stranger, fcntl.LOCK_EX)  # e.g. a frozen process that holds no SQLite lock
    try:
        started = time.monotonic()
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t (who) VALUES ('late')"))
        assert 0.2 <= time.monotonic() - started < 20
    finally:
        os.close(stranger)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT who FROM t")).scalar() == "late"
    engine.dispose()


def test_a_nested_write_on_a_second_connection_fails_at_once(tmp_path):
    """The same thread writing through two connections would wait for itself (writer
    lock, then SQLite's busy timeout: a minute); it is refused at once instead."""
    import pytest

    from grid_tasks.db.errors import DatabaseError

    engine = _engine(tmp_path)
    with engine.connect() as outer, engine.connect() as inner:
        outer.execute(text("INSERT INTO t (who) VALUES ('outer')"))
        started = time.monotonic()
        with pytest.raises(DatabaseError, match="nested write"):
            inner.execute(text("INSERT INTO t (who) VALUES ('inner')"))
        assert time.monotonic() - started < 1
        inner.rollback()
        outer.commit()
        inner.execute(text("INSERT INTO t (who) VALUES ('after')"))  # free again
        inner.commit()
        assert [r[0] for r in inner.execute(text("SELECT who FROM t ORDER BY id"))] \
            == ["outer", "after"]
    engine.dispose()

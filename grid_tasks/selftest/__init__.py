"""``grid-tasks selftest --security``: issue 20's attacks, performed against a private grid.

Each attack (:mod:`.messages`, :mod:`.confinement`, :mod:`.bounds`, :mod:`.modes`) is
really carried out - forged messages pushed into real queues, jobs submitted through
the one door, files stat'ed - and its row says what was observed, never what was
assumed.  :mod:`.runner` starts the grid (:class:`~grid_tasks.faults.harness.FaultGrid`)
and runs them; :mod:`.forge` holds the message-forging helpers the tests share.
"""

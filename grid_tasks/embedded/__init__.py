"""The embedded stack: a whole grid on one machine, with no process left behind.

* :mod:`.redis_server` - a private ``redis-server`` on a free loopback port;
* :mod:`.supervisor` - child processes in their own process groups, stopped together;
* :mod:`.stack` - Redis, database, scheduler with beat, node daemons, optional Flower.
"""

"""Node daemons: Celery workers on compute hosts that register and heartbeat.

* :mod:`.resources` - what a host really has (psutil) and host facts;
* :mod:`.registry` - the Redis side: registrations, heartbeats with a TTL, node states;
* :mod:`.daemon` - the worker bootstep that registers the node and runs the heartbeat;
* :mod:`.tasks` - node tasks (the node check of the demo workload).
"""

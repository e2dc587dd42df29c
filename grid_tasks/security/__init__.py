"""Security: message signing, Redis authentication and TLS, grid-map authorization.

* :mod:`.config` - ``GRID_TASKS_SIGNING*``, ``GRID_TASKS_REDIS_TLS_*`` and
  ``GRID_TASKS_GRIDMAP`` settings and their Celery / redis-py mapping;
* :mod:`.signing` - switches Celery's ``auth`` serializer on for an app;
* :mod:`.keys` - self-signed RSA keys and certificates, the trusted store;
* :mod:`.connections` - :func:`~grid_tasks.security.connections.redis_client`, the one way
  every component should get a configured Redis client (password, ACL user, TLS);
* :mod:`.gridmap` - ``GridMap.load(path).authorize(identity, rm) -> LocalAccount``;
* :mod:`.authorization` - ``authorize(settings, identity, rm)``: the configured
  grid map (``GRID_TASKS_GRIDMAP``), reloaded on change, None when unset;
* :mod:`.accounts` - ``run_as(account)``: how to start a job's processes as the
  mapped local account.

This package imports neither Celery nor Redis at import time: the submodules
that need them import them themselves.
"""

from grid_tasks.security.errors import (
    AccountError,
    GridMapError,
    KeyMaterialError,
    RunAsRefused,
    Unauthorized,
)

__all__ = ["AccountError", "GridMapError", "KeyMaterialError", "RunAsRefused", "Unauthorized"]

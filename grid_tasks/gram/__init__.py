"""GRAM on Celery: submission records, launch of job managers on nodes, their processes.

Flow: :class:`grid_tasks.client.Grid` stores a PENDING job and triggers its RM's
iteration (:mod:`grid_tasks.scheduling`); the iteration commits the start
(Maui ``Starting``, allocation, launch token) and sends one
``grid_tasks.gram.tasks.launch`` per chosen node; each node runs a job manager
(:mod:`grid_tasks.gram.jobmanager`) that starts the processes, records ACTIVE,
enforces limits and records DONE/FAILED with exit codes and accounting.
"""

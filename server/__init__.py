"""Dash and Flask plumbing: what sits between the web server and the pages.

Owns: the shared cache and the background-callback managers (diskcache or Celery, recorded in the job
ledger), the callback-error hook, request logs, limits and compression, the submissions HTTP API,
``/healthz``, the sentences a user gets when the disk, the broker or the database fails (``faults``) and
warming a process before it forks. May import: ``components`` (the page shell) and
``whestboard``; never ``pages``. ``app.create_app`` installs all of it.
"""

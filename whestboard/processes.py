"""Whether a process that owns a claim, a job or a sandbox is still alive.

Claims and job rows record ``pid`` (and the host) of their owner; a crash leaves
them behind, and whoever finds one asks here before taking it over.
"""

from __future__ import annotations

import os
import socket


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists on this machine (even another user's)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists; we may just not signal it
    return True


def owner_alive(pid: int, host: str | None) -> bool:
    """Like ``pid_alive`` for an owner recorded as pid and host; another host's owner is trusted."""
    if host and host != socket.gethostname():
        return True
    return pid_alive(pid)

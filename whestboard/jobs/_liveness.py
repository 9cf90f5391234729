"""Whether the process that owns a job, a claim or a sandbox is still alive: the one liveness rule.

Jobs, bake claims and sandbox folders record their owner as ``host:pid`` (or a
pid and a host); a crash leaves them behind, and whoever finds one asks here
before taking it over. The rule: an owner on *this* host is dead when its pid
no longer exists or is a zombie; an owner on another host is trusted alive
(only its silence, a stale heartbeat, can give it away). Dash's job handles
name a process as ``pid@start_time`` because pids wrap around.
"""

from __future__ import annotations

import os
import socket

import psutil


def this_worker() -> str:
    """``host:pid`` of the calling process: how a job records who holds it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists on this machine and is not a zombie (even another user's)."""
    try:
        return psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; we may just not look at it


def owner_alive(pid: int, host: str | None) -> bool:
    """Like ``pid_alive`` for an owner recorded as pid and host; another host's owner is trusted."""
    if host and host != socket.gethostname():
        return True
    return pid_alive(pid)


def worker_is_dead(worker: str | None) -> bool:
    """True only when we can see for sure: ``host:pid`` on this host whose process is gone."""
    if not worker or ":" not in worker:
        return False
    host, _, pid = worker.rpartition(":")
    if not pid.isdigit():
        return False
    return not owner_alive(int(pid), host)


def process_handle(pid: int) -> str:
    """``pid@start_time``: names one process for good, though its pid may be reused later."""
    try:
        return f"{pid}@{psutil.Process(pid).create_time():.3f}"
    except psutil.NoSuchProcess:
        return str(pid)


def process_of(handle: str) -> psutil.Process | None:
    """The process a handle names, unless it has exited or its pid now belongs to someone else."""
    pid, _, started = str(handle).partition("@")
    try:
        proc = psutil.Process(int(pid))
        if started and abs(proc.create_time() - float(started)) > 0.05:
            return None
        return proc
    except (psutil.NoSuchProcess, ValueError):
        return None


def handle_running(handle: str) -> bool:
    proc = process_of(handle)
    try:
        return proc is not None and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

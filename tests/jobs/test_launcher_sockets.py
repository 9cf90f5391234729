"""The job launcher drops every listening socket it inherited (the web server's), nothing else."""

from __future__ import annotations

import os
import socket

from whestboard.jobs import _launcher


def test_listening_sockets_are_closed_and_connected_ones_and_files_kept(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    ours, theirs = socket.socketpair()
    data = open(tmp_path / "kept.txt", "w")  # noqa: SIM115 - closed below
    try:
        closed = _launcher.close_listening_sockets()
        assert listener.fileno() in closed
        assert ours.fileno() not in closed and theirs.fileno() not in closed and data.fileno() not in closed
        ours.sendall(b"ping")
        assert theirs.recv(4) == b"ping"
        data.write("still open")
        data.flush()
        assert (tmp_path / "kept.txt").read_text() == "still open"
        try:
            os.fstat(closed[closed.index(listener.fileno())])
            still_open = True
        except OSError:
            still_open = False
        assert not still_open
    finally:
        listener.detach()  # its descriptor is already closed
        for sock in (ours, theirs):
            sock.close()
        data.close()

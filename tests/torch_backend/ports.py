"""A TCP port for a test's own rendezvous or receiver."""

import socket


def unused_port() -> int:
    """A port no one listens on now: tests run in parallel workers, so a fixed one could be taken."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

"""Running a command with a pseudo-terminal as its output, as a user at a terminal sees it."""

import fcntl
import os
import pty
import struct
import subprocess
import termios


def on_a_terminal(command, cwd, expected_status=0):
    """Output of ``command`` run with a pseudo-terminal as stdout and stderr (which must end in
    ``expected_status``)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new pty is 0 columns wide
    process = subprocess.Popen(command, cwd=cwd, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=120) == expected_status, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")

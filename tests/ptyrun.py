"""tests/ptyrun.py - run a program with its stderr on a pseudo-terminal, for
the tests of what programs draw only on a terminal (progress, status lines)."""
import os
import pty
import subprocess


def run_with_tty_stderr(argv):
    """Run argv with stdout piped and stderr on a new pty; return
    (returncode, stdout bytes, stderr bytes as the terminal received them)."""
    master, slave = pty.openpty()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal has no writer left
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    return p.returncode, p.stdout, err

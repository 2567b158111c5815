#!/usr/bin/env python3
"""pty_run.py COLS OUT CMD [ARG...]: run CMD with stdout and stderr on a pseudo-terminal COLS columns
wide (24 rows), and write every byte the terminal received to OUT. Exits with CMD's status."""
import fcntl, os, pty, struct, sys, termios

cols, out, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(sys.stdout.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    os.execvp(argv[0], argv)
got = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:  # EIO: the child closed the terminal
        break
    if not chunk:
        break
    got += chunk
_, status = os.waitpid(pid, 0)
open(out, "wb").write(got)
sys.exit(os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8)

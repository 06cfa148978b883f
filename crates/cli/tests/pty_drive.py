"""Drives a command in a pseudo-terminal, as a person at a terminal would.

    python3 pty_drive.py STEPS_JSON COMMAND [ARGS...]

STEPS_JSON is a list of {"expect": TEXT} (wait, up to 30 s, until the terminal has shown
TEXT since the last expectation) and {"send": KEYS} (type KEYS). After the steps, the
output is read to the end. Prints everything the terminal showed and exits with the
command's status (1 after a timed-out expectation, naming it). Python's own `pty`: nothing
to install.
"""
import json
import os
import pty
import select
import sys
import time

steps = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])

shown = b""
seen = 0


def read(timeout):
    global shown
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        return True
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        return False
    if not chunk:
        return False
    shown += chunk
    return True


def done(code, why=""):
    sys.stdout.write(shown.decode("utf-8", "replace"))
    if why:
        sys.stdout.write("\n[pty_drive] " + why + "\n")
    sys.stdout.flush()
    sys.exit(code)


for step in steps:
    if "expect" in step:
        needle = step["expect"].encode()
        deadline = time.time() + 30
        while needle not in shown[seen:]:
            if time.time() > deadline or not read(0.2) and needle not in shown[seen:]:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
                done(1, "expected %r, not shown" % step["expect"])
        seen = shown.index(needle, seen) + len(needle)
    if "send" in step:
        time.sleep(0.05)
        os.write(fd, step["send"].encode())

deadline = time.time() + 60
while time.time() < deadline and read(0.5):
    pass
_, status = os.waitpid(pid, 0)
done(os.waitstatus_to_exitcode(status))

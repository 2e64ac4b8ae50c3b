#!/usr/bin/env python3
"""The README's shell sessions run as written: every block of `$ dvar ...`
(and `$ python3 ...`, `$ ls ...`) commands is run in order in a fresh directory, with the
built dvar first on PATH, and each command's standard output must be the
lines the README shows under it. (The C API session is tests/api's.)"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402
from test_cli import CliCase  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sessions(text):
    """The README's blocks of commands: [(line number, [(command, expected output)])]."""
    found = []
    for m in re.finditer(r"^```\n(\$ .*?)^```$", text, re.S | re.M):
        lines = m.group(1).splitlines()
        steps = []
        while lines:
            cmd = lines.pop(0)[2:]
            # A command goes on over the next lines until its quotes close.
            while not balanced(cmd):
                cmd += "\n" + lines.pop(0)
            out = []
            while lines and not lines[0].startswith("$ "):
                out.append(lines.pop(0))
            steps.append((cmd, "".join(line + "\n" for line in out)))
        if all(c.split()[0] in ("dvar", "python3", "ls") for c, _ in steps):
            found.append((text.count("\n", 0, m.start()) + 1, steps))
    return found


def balanced(cmd):
    try:
        shlex.split(cmd, comments=True)
        return True
    except ValueError:
        return False


class ReadmeTest(CliCase):
    group = "readme"

    def test_sessions(self):
        with open(os.path.join(SOURCE, "README.md")) as f:
            found = sessions(f.read())
        self.assertGreaterEqual(len(found), 2)
        # dvar and Debian's python3 (with numpy) first on PATH; fixtures/ beside.
        bindir = tempfile.mkdtemp(dir=self.dir)
        os.symlink(test_cli.DVAR, os.path.join(bindir, "dvar"))
        os.symlink(sys.executable, os.path.join(bindir, "python3"))
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
        for line, steps in found:
            work = tempfile.mkdtemp(dir=self.dir)
            os.symlink(os.path.join(SOURCE, "fixtures"), os.path.join(work, "fixtures"))
            for cmd, want in steps:
                with self.subTest(line=line, cmd=cmd):
                    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=work, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    self.assertEqual(p.returncode, 0, "README line %d: %s\n%s" % (line, cmd, p.stderr))
                    self.assertEqual(p.stdout, want, "README line %d: %s" % (line, cmd))


if __name__ == "__main__":
    test_cli.run(lambda args: [ReadmeTest])

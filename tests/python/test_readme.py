"""The README's "Python" section runs as written: its install command (with
DESTDIR set, from a directory whose build/ is the build under test), then
every python block in order, in one fresh directory (fixtures/ beside),
importing the package just installed with DVAR_LIBRARY unset; each block's
standard output must be the "prints" block that follows it."""

import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import SOURCE

BUILD = os.environ.get("DVAR_BUILD_DIR")


def section():
    with open(os.path.join(SOURCE, "README.md")) as f:
        text = f.read()
    start = text.index("\n## Python\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def blocks():
    """[(language, code, expected output or None)] in the section's order."""
    found = []
    pattern = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
    text = section()
    ms = list(pattern.finditer(text))
    for k, m in enumerate(ms):
        lang = m.group(1)
        if lang not in ("sh", "python"):
            continue
        want = None
        if lang == "python" and k + 1 < len(ms) and ms[k + 1].group(1) == "":
            between = text[m.end():ms[k + 1].start()]
            if between.strip() == "prints":
                want = ms[k + 1].group(2)
        found.append((lang, m.group(2), want))
    return found


BLOCKS = blocks()


def test_section_has_what_it_must():
    langs = [b[0] for b in BLOCKS]
    assert langs.count("sh") == 1 and langs.count("python") >= 3
    assert [b[1] for b in BLOCKS if b[0] == "sh"] == [
        "cmake --install build --component python\n"]
    assert all(want is not None for lang, _, want in BLOCKS if lang == "python")
    code = "".join(b[1] for b in BLOCKS)
    for needed in ("dvar.open(", "dvar.torch.load(", "safetensors", "emb[", "dvar.save("):
        assert needed in code


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if not BUILD:
        pytest.skip("DVAR_BUILD_DIR is not set (ctest sets it)")
    work = str(tmp_path_factory.mktemp("readme"))
    os.symlink(BUILD, os.path.join(work, "build"))
    os.symlink(os.path.join(SOURCE, "fixtures"), os.path.join(work, "fixtures"))
    dest = os.path.join(work, "dest")
    (cmd,) = [code for lang, code, _ in BLOCKS if lang == "sh"]
    p = subprocess.run(["bash", "-e", "-c", cmd], cwd=work, env=dict(os.environ, DESTDIR=dest),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    (pkg,) = glob.glob(os.path.join(dest, "usr", "local", "lib", "python3*", "*-packages", "dvar"))
    env = {k: v for k, v in os.environ.items() if k not in ("DVAR_LIBRARY", "PYTHONPATH")}
    # The installed package first; the source tree's left out; others (torch's) kept.
    src = os.path.realpath(os.path.join(SOURCE, "python"))
    keep = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != src]
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(pkg)] + keep)
    return work, env


@pytest.mark.parametrize("k", [k for k, b in enumerate(BLOCKS) if b[0] == "python"])
def test_python_block(installed, k):
    work, env = installed
    _, code, want = BLOCKS[k]
    if "dvar.torch" in code:
        try:
            import torch  # noqa: F401
        except ImportError:
            pytest.skip("PyTorch is not installed: the README's PyTorch block cannot run here")
    p = subprocess.run([sys.executable, "-c", code], cwd=work, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, "README python block %d:\n%s\n%s" % (k, code, p.stderr)
    assert p.stdout == want, "README python block %d" % k

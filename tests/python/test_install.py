"""How the package finds libdvar: `cmake --install BUILD --component
python` installs it with its own copy of libdvar, which it loads when
DVAR_LIBRARY is unset; without any, the error names all three places.
pip can build the package (python/pyproject.toml)."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import SOURCE

BUILD = os.environ.get("DVAR_BUILD_DIR")


def run_python(code, env, cwd):
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("DVAR_LIBRARY", "PYTHONPATH")}
    env.update(extra)
    return env


@pytest.mark.skipif(not BUILD, reason="DVAR_BUILD_DIR is not set (ctest sets it)")
def test_cmake_install_component(tmp_path):
    dest = str(tmp_path / "dest")
    p = subprocess.run(["cmake", "--install", BUILD, "--component", "python", "--prefix",
                        "/usr/local"], env=dict(os.environ, DESTDIR=dest),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    pkgs = glob.glob(os.path.join(dest, "usr", "local", "lib", "python3*", "*-packages", "dvar"))
    assert len(pkgs) == 1, p.stdout
    pkg = pkgs[0]
    assert os.path.isfile(os.path.join(pkg, "_lib", "libdvar.so"))
    assert os.path.isfile(os.path.join(pkg, "__init__.py"))
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    assert not glob.glob(os.path.join(pkg, "__pycache__"))
    # Imported from there with DVAR_LIBRARY unset: the package's own copy.
    r = run_python("import dvar, numpy as np\n"
                   "print(dvar.library_path)\nprint(dvar.library_found_by)\n"
                   "ck = dvar.open(%r)\nprint(float(ck['scalar_f32'][()]))"
                   % os.path.join(SOURCE, "fixtures", "v1"),
                   clean_env(PYTHONPATH=os.path.dirname(pkg)), str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == os.path.join(pkg, "_lib", "libdvar.so")
    assert "installed with the package" in lines[1] and lines[2] == "3.5"


def test_not_found_names_all_three(tmp_path):
    # Asked in a fresh process: this one may have loaded libdvar.so.0 already.
    probe = run_python("import ctypes\ntry:\n    ctypes.CDLL('libdvar.so.0')\n"
                       "except OSError:\n    print('none')", clean_env(), str(tmp_path))
    if probe.stdout.strip() != "none":
        pytest.skip("a libdvar is installed system-wide: the last fallback finds it")
    if os.path.exists(os.path.join(SOURCE, "python", "dvar", "_lib")):
        pytest.skip("python/dvar/_lib/ holds a copy of libdvar (for a wheel): the package finds it")
    r = run_python("import dvar", clean_env(PYTHONPATH=os.path.join(SOURCE, "python")),
                   str(tmp_path))
    assert r.returncode != 0
    err = r.stderr
    assert "libdvar not found" in err
    assert "DVAR_LIBRARY environment variable: not set" in err
    assert "installed with the package" in err and "system's loader" in err


def test_pip_builds_a_wheel(tmp_path):
    try:
        import setuptools  # noqa: F401
    except ImportError:
        pytest.skip("setuptools is not installed (Debian: python3-setuptools)")
    src = str(tmp_path / "src")
    shutil.copytree(os.path.join(SOURCE, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-w", str(tmp_path / "wheels"), src],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0 and "No module named pip" in p.stdout:
        pytest.skip("pip is not installed (Debian: python3-pip)")
    assert p.returncode == 0, p.stdout
    wheels = glob.glob(str(tmp_path / "wheels" / "dvar-*.whl"))
    assert len(wheels) == 1
    import zipfile
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "dvar/__init__.py" in names and "dvar/torch.py" in names and "dvar/py.typed" in names

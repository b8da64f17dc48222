"""Builds agentctl's release artifacts (`make dist`): the wheel, a shiv zipapp and a PyInstaller onedir build.

    python packaging/build.py [all|wheel|zipapp|onedir|measure] [--out DIR] [--work DIR] [--archive]

- wheel:  `dist/agentctl-<version>-cp311-abi3-linux_<machine>.whl`, built from a clean copy of the sources
  (setuptools would otherwise pack stale modules left in the work tree's build/lib). Platform-specific for one
  module: the stdio witness's relay in C (setup.py), on Python's limited API, so one wheel serves CPython >= 3.11.
- zipapp: `dist/agentctl-<version>-cp<XY>-linux-<machine>.pyz`, one file for hosts with that CPython; shiv
  installs the wheel and its pinned dependencies (../constraints.txt) into it; on first start it unpacks
  into $SHIV_ROOT (default ~/.shiv) and compiles every module to bytecode there, once per build.
- onedir: `dist/agentctl-<version>-linux-<machine>/`, a directory with the `agentctl` executable and its own
  CPython, for hosts with no Python at all; with --archive also a .tar.gz of it.
- measure: size of each artifact and its `--version` start time (median of 5), for the README.

The zipapp and onedir tools run in a build venv of their own (`<work>/dist-venv`, made once per change of
packaging/requirements.txt, constraints.txt or pyproject.toml): PyInstaller cannot follow the editable
install of the development venv, and the artifacts must hold what the wheel holds, not the work tree.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fcntl
import functools
import hashlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REQUIREMENTS = HERE / "requirements.txt"
CONSTRAINTS = REPO / "constraints.txt"
PYPROJECT = REPO / "pyproject.toml"
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "agentctl")


def version() -> str:
    import tomllib

    return tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def machine() -> str:
    return platform.machine() or "unknown"


def python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def wheel_name() -> str:
    return f"agentctl-{version()}-cp311-abi3-linux_{machine()}.whl"


def zipapp_name() -> str:
    return f"agentctl-{version()}-{python_tag()}-linux-{machine()}.pyz"


def onedir_name() -> str:
    return f"agentctl-{version()}-linux-{machine()}"


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout)
        raise SystemExit(f"build step failed ({result.returncode}): {' '.join(argv[:3])} ...")


def _timed(label: str, fn, *args, **kwargs):
    start = time.monotonic()
    value = fn(*args, **kwargs)
    print(f"  {label}: {time.monotonic() - start:.1f} s", flush=True)
    return value


# -------------------------------------------------------------------------------------------- wheel


def copy_sources(src: Path) -> Path:
    """A clean copy of what the wheel is built from, in a fresh `src`."""
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "*.so")  # .so: a stale in-place build
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    return src


def build_wheel(out: Path, work: Path) -> Path:
    src = copy_sources(work / "src")
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / wheel_name()
    wheel.unlink(missing_ok=True)
    # The build backend (setuptools) pinned like everything else, not whatever the index has today.
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--build-constraint", str(CONSTRAINTS),
          "--wheel-dir", str(out), str(src)], cwd=work)
    if not wheel.is_file():
        raise SystemExit(f"pip wheel did not produce {wheel.name}")
    return wheel


# ------------------------------------------------------------------------------------ build venv


def _deps_key(*extra: Path) -> str:
    key = hashlib.sha256()
    for file in (CONSTRAINTS, PYPROJECT, *extra):
        key.update(file.read_bytes())
    key.update(sys.version.encode())
    return key.hexdigest()


def _venv_python(path: Path) -> Path:
    return path / "bin" / "python"


def build_venv(work: Path, wheel: Path) -> Path:
    """The build tools and the wheel (with its pinned dependencies), apart from the development venv."""
    path = work / "dist-venv"
    key = _deps_key(REQUIREMENTS)
    stamp = path / ".agentctl-build-stamp"
    python = _venv_python(path)
    if not (stamp.is_file() and stamp.read_text() == key and python.exists()):
        shutil.rmtree(path, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
        _run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "-c", str(CONSTRAINTS),
             "-r", str(REQUIREMENTS), str(wheel)],
            cwd=work,
        )
        stamp.write_text(key)
    else:
        # Dependencies are unchanged (the stamp covers pyproject.toml): only agentctl itself is new.
        _run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps", "--force-reinstall",
             str(wheel)],
            cwd=work,
        )
    return path


# ------------------------------------------------------------------------------------------ zipapp


def zipapp_site(work: Path, wheel: Path, venv_dir: Path) -> Path:
    """site-packages for the zipapp: the wheel and its pinned dependencies, refreshed like the build venv."""
    site = work / "zipapp-site"
    stamp = work / ".zipapp-site-stamp"
    python = str(_venv_python(venv_dir))
    key = _deps_key()
    if stamp.is_file() and stamp.read_text() == key and site.is_dir():
        argv = [python, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(site), "--upgrade",
                "--no-deps", str(wheel)]
    else:
        shutil.rmtree(site, ignore_errors=True)
        stamp.unlink(missing_ok=True)
        argv = [python, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(site),
                "-c", str(CONSTRAINTS), str(wheel)]
    _run(argv, cwd=work)
    stamp.write_text(key)
    # Console scripts pip wrote for the build venv's interpreter; the zipapp's entry point replaces them.
    shutil.rmtree(site / "bin", ignore_errors=True)
    return site


def build_zipapp(out: Path, work: Path, wheel: Path, venv_dir: Path) -> Path:
    site = zipapp_site(work, wheel, venv_dir)
    preamble = work / "agentctl_preamble.py"
    text = (HERE / "zipapp_preamble.py").read_text()
    text = text.replace("BUILT_FOR = (0, 0)", f"BUILT_FOR = {tuple(sys.version_info[:2])!r}", 1)
    text = text.replace('BUILT_MACHINE = ""', f"BUILT_MACHINE = {machine()!r}", 1)
    preamble.write_text(text)
    target = out / zipapp_name()
    target.unlink(missing_ok=True)
    interpreter = f"/usr/bin/env python{sys.version_info[0]}.{sys.version_info[1]}"
    _run(
        # --compile-pyc: shiv keeps no .pyc in the archive (they would be stale once unpacked); it compiles
        # everything when it unpacks into $SHIV_ROOT, once per build, so every later start loads bytecode.
        [str(venv_dir / "bin" / "shiv"), "--site-packages", str(site), "--entry-point", "agentctl.cli:main",
         "--output-file", str(target), "--python", interpreter, "--compile-pyc", "--reproducible",
         "--preamble", str(preamble)],
        cwd=work,
        env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"},
    )
    return target


# ------------------------------------------------------------------------------------------ onedir


def build_onedir(out: Path, work: Path, venv_dir: Path, *, archive: bool = False) -> Path:
    name = onedir_name()
    pyi = work / "pyinstaller"
    # The work path is kept between builds: PyInstaller reuses what did not change there.
    shutil.rmtree(pyi / "dist", ignore_errors=True)
    pyi.mkdir(parents=True, exist_ok=True)
    _run(
        [str(venv_dir / "bin" / "pyinstaller"), "--noconfirm", "--onedir", "--name", "agentctl",
         "--distpath", str(pyi / "dist"), "--workpath", str(pyi / "work"), "--specpath", str(pyi),
         # Subcommands import their modules lazily and passthrough strategies by name: take them all.
         "--collect-submodules", "agentctl",
         # Package data (the hub's page under agentctl/hub/static) is not code: name it too.
         "--collect-data", "agentctl",
         "--strip", "--log-level", "WARN", str(HERE / "pyinstaller_entry.py")],
        cwd=work,
    )
    target = out / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(pyi / "dist" / "agentctl"), target)
    if archive:
        tarball = out / f"{name}.tar.gz"
        with tarfile.open(tarball, "w:gz") as tar:
            tar.add(target, arcname=name)
    return target


# ----------------------------------------------------------------------------------------- measure


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def start_times(argv: list[str], runs: int = 5, env: dict[str, str] | None = None) -> tuple[float, list[float]]:
    """Wall time of `argv --version` from an empty directory: (first run, the next `runs` runs)."""
    times = []
    with tempfile.TemporaryDirectory(prefix="agentctl-measure-") as empty:
        for _ in range(runs + 1):
            start = time.perf_counter()
            subprocess.run([*argv, "--version"], cwd=empty, env=env, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    return times[0], times[1:]


def measure(out: Path, work: Path) -> list[str]:
    lines = []
    wheel = out / wheel_name()
    pyz = out / zipapp_name()
    onedir = out / onedir_name()
    tarball = out / f"{onedir.name}.tar.gz"
    if wheel.is_file():
        installed = work / "dist-venv" / "bin" / "agentctl"  # the same wheel, installed in the build venv
        timing = ""
        if installed.is_file():
            _, rest = start_times([str(installed)])
            timing = f"; --version {statistics.median(rest):.2f} s (median of {len(rest)}, installed in a venv)"
        lines.append(f"wheel   {wheel.name}: {_size(wheel) / 1e6:.2f} MB{timing}")
    if pyz.is_file():
        with tempfile.TemporaryDirectory(prefix="agentctl-shiv-") as root:
            env = {**os.environ, "SHIV_ROOT": root}
            first, rest = start_times([str(pyz)], env=env)
        lines.append(
            f"zipapp  {pyz.name}: {_size(pyz) / 1e6:.1f} MB; --version {statistics.median(rest):.2f} s "
            f"(median of {len(rest)}), first run (unpack + compile) {first:.1f} s"
        )
    if onedir.is_dir():
        extra = f", {_size(tarball) / 1e6:.0f} MB as .tar.gz" if tarball.is_file() else ""
        first, rest = start_times([str(onedir / "agentctl")])
        lines.append(
            f"onedir  {onedir.name}/: {_size(onedir) / 1e6:.0f} MB{extra}; --version "
            f"{statistics.median(rest):.2f} s (median of {len(rest)})"
        )
    return lines


# -------------------------------------------------------------------------------------------- main


def _build(what: str, out: Path, work: Path, *, archive: bool) -> list[Path]:
    print(f"building agentctl {version()} into {out}", flush=True)
    wheel = _timed("wheel", build_wheel, out, work)
    if what == "wheel":
        return [wheel]
    venv_dir = _timed("build venv", build_venv, work, wheel)
    jobs = []
    if what in ("all", "zipapp"):
        jobs.append(("zipapp (shiv)", build_zipapp, out, work, wheel, venv_dir))
    if what in ("all", "onedir"):
        jobs.append(("onedir (PyInstaller)", functools.partial(build_onedir, archive=archive), out, work, venv_dir))
    # Both builds mostly wait on their own subprocess: run them side by side.
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(_timed, *job) for job in jobs]
        return [wheel, *(future.result() for future in futures)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="packaging/build.py", description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=["all", "wheel", "zipapp", "onedir", "measure"])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where artifacts go (default: dist/)")
    parser.add_argument("--work", type=Path, default=REPO / "build" / "packaging", help="scratch and build venv")
    parser.add_argument("--archive", action="store_true", help="also pack the onedir build as .tar.gz")
    args = parser.parse_args(argv)
    out, work = args.out.absolute(), args.work.absolute()
    if args.what == "measure":
        print("\n".join(measure(out, work)) or f"no artifacts in {out}")
        return 0
    if sys.platform != "linux":
        raise SystemExit("packaging/build.py builds Linux artifacts only")
    work.mkdir(parents=True, exist_ok=True)
    with open(work / ".lock", "w") as lock:
        # One build at a time per work dir (make dist and the smoke test may share it).
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = _build(args.what, out, work, archive=args.archive)
    for path in built:
        print(f"  -> {path.relative_to(out.parent) if path.is_relative_to(out.parent) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Pack what Spark executors need to run ``mysqlbackup replay`` on a cluster.

One command (docs/cluster.md)::

    .venv/bin/python scripts/pack_replay_env.py --output-dir dist

writes two files:

* ``dist/replay-env.tar.gz``: a virtualenv of the project's requirements (setup.cfg's
  ``install_requires``, the ``s3`` extra and the ``replay`` one's pyarrow, which the tasks
  of ``--parquet`` write with; not the project's sources, not pyspark, which the workers'
  Spark provides), packed by venv-pack2. Ship it with ``--conf
  spark.archives=dist/replay-env.tar.gz#environment`` and name its interpreter with
  ``--python ./environment/bin/python``. It also holds the project's compiled modules
  (the row loop, the stream path) built for this Python, at their package paths, and
  no other file of the project: without them the executors decode with the pure Python
  twins, several times slower. Its ``python`` links to the same base
  interpreter (path and version) as the one that runs this script: the workers need
  that Python at that path (``--python-prefix`` names another prefix);
* ``dist/replay.zip``: the ``mysqlbackup`` and ``replay`` packages' sources (no
  compiled or generated files), for ``spark-submit --py-files`` (``replay`` itself ships
  the same zip on its own).

The build runs in a temporary folder, removed at the end.
"""

import argparse
import configparser
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


DEFAULT_EXTRAS = ("s3", "replay")  # S3, and pyarrow for --parquet (the tasks write it)
PROVIDED = ("pyspark",)  # the workers' Spark has its own


def requirements(extras=DEFAULT_EXTRAS):
    """setup.cfg's install_requires and the given extras, one requirement a string,
    less what the workers' Spark provides (PROVIDED)."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    lines = cfg.get("options", "install_requires").splitlines()
    for extra in extras:
        lines += cfg.get("options.extras_require", extra).splitlines()
    lines = [line.strip() for line in lines if line.strip()]
    return [line for line in lines
            if not any(line.startswith(name) for name in PROVIDED)]


def run(*command, **kwargs):
    """Run ``command``; exit with its output's last lines when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode:
        sys.exit(f"{' '.join(command[:4])} ... failed ({done.returncode}):\n"
                 f"{(done.stdout + done.stderr)[-2000:]}")
    return done


def compiled_modules(env, root=REPO):
    """Copy the project's compiled modules built for this Python (the row loop, the
    stream path) into ``env``'s site-packages at their package paths, and nothing else
    of the project: the executors import the shipped sources from the zip and these
    from there (``mysqlbackup.speedups.import_compiled``). Returns their relative paths
    (none when the package was not built: the executors then run the pure twins)."""
    import importlib.machinery
    site = run(os.path.join(env, "bin", "python"), "-c",
               "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    copied = []
    for package in ("mysqlbackup", "replay"):
        for folder, _dirs, files in os.walk(os.path.join(root, package)):
            for name in files:
                if not name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                    continue
                relative = os.path.relpath(os.path.join(folder, name), root)
                os.makedirs(os.path.dirname(os.path.join(site, relative)), exist_ok=True)
                shutil.copy2(os.path.join(root, relative), os.path.join(site, relative))
                copied.append(relative)
    return sorted(copied)


def pack(output_dir, extras, python_prefix=None, base_python=None):
    """Build the environment and the zip into ``output_dir``; returns their paths."""
    from replay.spark.shipping import write_zip
    os.makedirs(output_dir, exist_ok=True)
    base_python = base_python or getattr(sys, "_base_executable", sys.executable)
    env_out = os.path.abspath(os.path.join(output_dir, "replay-env.tar.gz"))
    zip_out = os.path.abspath(os.path.join(output_dir, "replay.zip"))
    work = tempfile.mkdtemp(prefix="replay-env-")
    try:
        env, tool = os.path.join(work, "env"), os.path.join(work, "tool")
        run(base_python, "-m", "venv", env)
        pip = [os.path.join(env, "bin", "python"), "-m", "pip", "--disable-pip-version-check"]
        run(*pip, "install", "-q", *requirements(extras))
        compiled_modules(env)
        run(*pip, "install", "-q", "--target", tool, "venv-pack2")  # the packer: not packed
        if os.path.exists(env_out):
            os.remove(env_out)
        command = [base_python, "-m", "venv_pack", "-p", env, "-o", env_out, "-q"]
        if python_prefix:
            command += ["--python-prefix", python_prefix]
        run(*command, env=dict(os.environ, PYTHONPATH=tool))
        write_zip(zip_out, REPO)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return env_out, zip_out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default=os.path.join(REPO, "dist"))
    parser.add_argument("--extra", action="append", default=None,
                        help="setup.cfg extras to add (default: s3 and replay, less "
                        "pyspark; repeatable)")
    parser.add_argument("--python-prefix", help="the base Python's prefix on the workers, "
                        "when it differs from this machine's")
    args = parser.parse_args()
    env_out, zip_out = pack(args.output_dir, args.extra or DEFAULT_EXTRAS, args.python_prefix)
    for path in (env_out, zip_out):
        print(f"{path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()

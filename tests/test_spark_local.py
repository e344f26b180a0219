"""A local Spark's tasks run this very package: the Python workers the driver's JVM
starts import it from where the driver does, compiled row loop included (a shipped zip
holds sources only: a replay run from another folder than a checkout's decoded with the
pure Python twins, twice as slowly)."""

import os
import subprocess
import sys

import pytest

from replay.spark.context import is_local_master

PROBE = """
import json
from replay.job.decoding import rowdecode
import replay
from replay.spark.context import spark_context

def where(_):
    from replay.job.decoding import rowdecode
    import replay
    return replay.__file__, getattr(rowdecode.loop, "__name__", None)

context = spark_context(MASTER)
first = context.parallelize([0, 1], 2).map(where).collect()
context.stop()  # a second context of the same JVM (its workers: the same environment)
context = spark_context(MASTER)
second = context.parallelize([0, 1], 2).map(where).collect()
context.stop()
print(json.dumps({"driver": [replay.__file__, getattr(rowdecode.loop, "__name__", None)],
                  "workers": first + second}))
"""


@pytest.mark.parametrize("master, local", [
    (None, True), ("local", True), ("local[*]", True), ("local[2]", True),
    ("local[4,2]", True), ("local-cluster[2,1,1024]", False), ("spark://h:7077", False),
    ("yarn", False)])
def test_which_masters_run_their_tasks_here(master, local):
    assert is_local_master(master) is local


@pytest.mark.server  # a child process (its own JVM)
@pytest.mark.parametrize("master", [None, "local[2]"])
def test_workers_import_what_the_driver_imports_from_any_folder(tmp_path, master):
    import json
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user runs it
    done = subprocess.run([sys.executable, "-c", PROBE.replace("MASTER", repr(master))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["workers"] == [seen["driver"]] * 4, seen


ZIPPED = """
import json
from mysqlbackup import speedups
from replay.job.decoding import changejson, rowcount, rowdecode, rowtext
import replay
print(json.dumps([replay.__file__, rowdecode.loop.__file__, speedups.compiled is not None,
                  rowdecode.describe()]))
"""


@pytest.mark.server  # child processes
def test_a_zip_of_the_sources_finds_the_compiled_modules_on_its_path(tmp_path):
    """A cluster's executors import the shipped zip (sources only) and the compiled
    modules from the packed environment, at their package paths; without one, from
    the installation the driver's own come from (the workers' Python is the driver's)."""
    import json
    import shutil

    from mysqlbackup import speedups
    from replay.job.decoding import changejson, rowcount, rowdecode, rowtext
    from replay.spark.shipping import source_root, write_zip
    if rowdecode.compiled is None or speedups.compiled is None:
        pytest.skip(f"the compiled modules are not built here: {rowdecode.describe()}, "
                    f"{speedups.describe()}")
    archive = write_zip(str(tmp_path / "replay.zip"))
    native = tmp_path / "site"
    compiled = (rowdecode.compiled, rowtext.compiled, changejson.compiled, rowcount.compiled,
                speedups.compiled)
    for module in compiled:
        relative = os.path.relpath(module.__file__, source_root())
        (native / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(module.__file__, native / relative)
    seen = {}
    for name, path in (("zip", archive), ("zip and site", f"{archive}{os.pathsep}{native}")):
        env = dict(os.environ, PYTHONPATH=path)
        done = subprocess.run([sys.executable, "-c", ZIPPED], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        seen[name] = json.loads(done.stdout)
    packed = str(native / os.path.relpath(rowdecode.compiled.__file__, source_root()))
    whole = "row decoding: compiled (Cython)"  # every twin, _rowloop's C parts taken
    assert seen["zip and site"] == [f"{archive}/replay/__init__.py", packed, True, whole], seen
    assert seen["zip"] == [f"{archive}/replay/__init__.py", rowdecode.compiled.__file__,
                           True, whole], seen

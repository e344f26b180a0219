"""The one function a replay sends to its executors before any task of its own: can
their Python import the job?

``replay.spark.shipping`` registers this module to be pickled by value, so that the
probe reaches an executor whose Python has neither this package nor its requirements,
and says which module is missing instead of failing to unpickle. It imports nothing
of the project at the top.
"""


def probe(modules, protocol):
    """Executor side: ``{"where", "python", "version", "missing", "decoding"}``;
    ``missing`` is the first of ``modules`` (or the fsspec implementation of
    ``protocol``) that does not import, as ``(module asked for, module missing,
    message)``, or None; ``decoding``: whether the row loop there is the compiled one,
    and ``rowdecode.describe()``'s line, ``(compiled, line)``; or None."""
    import importlib
    import os
    import socket
    import sys
    missing = None
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            missing = (name, getattr(e, "name", None) or name, str(e).splitlines()[0])
            break
    if missing is None and protocol not in ("file", "local", ""):
        try:
            import fsspec
            fsspec.get_filesystem_class(protocol)
        except ImportError as e:
            missing = (f"fsspec's {protocol}://", getattr(e, "name", None) or protocol,
                       str(e).splitlines()[0])
        except ValueError:
            pass  # a protocol fsspec does not know: the task says so with its store
    decoding = None  # which row loop the tasks would run (compiled, or why not)
    if missing is None:
        try:
            rowdecode = importlib.import_module("replay.job.decoding.rowdecode")
            for name in ("rowtext", "changejson", "rowcount"):  # each loads its own twin
                importlib.import_module(f"replay.job.decoding.{name}")
            line = rowdecode.describe()
            decoding = (line == rowdecode.COMPILED, line)
        except ImportError:
            pass
    where = os.environ.get("SPARK_LOCAL_IP") or socket.gethostname()
    return {"where": where, "python": sys.executable,
            "version": "%d.%d" % sys.version_info[:2], "missing": missing,
            "decoding": decoding}

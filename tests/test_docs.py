"""The documentation: docs/cli.md is what scripts/gen_cli_reference.py makes of the click
commands today; the site (mkdocs.yml, docs/) builds with ``mkdocs build --strict`` (a
broken link or anchor fails it); the README's links land on pages and anchors that
exist; and the built site, opened in headless Chromium (Debian's ``chromium``, driven
over the DevTools protocol on a pipe: no extra Python package), shows its front page,
the CLI reference with every command, and search results for "restore"."""

import functools
import http.server
import importlib.util
import json
import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time

import click
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI_MD = os.path.join(ROOT, "docs", "cli.md")


def generator():
    """scripts/gen_cli_reference.py as a module."""
    path = os.path.join(ROOT, "scripts", "gen_cli_reference.py")
    spec = importlib.util.spec_from_file_location("gen_cli_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_tree():
    """(command, context) of every command of the click tree, entry points included."""
    gen = generator()
    from mysqlbackup.cli import main
    root = click.Context(main, info_name=gen.PROG, auto_envvar_prefix=gen.ENV_PREFIX)
    return list(gen.walk(main, root))


def command_paths():
    """Every command path of the click tree, as the reference's headings name them."""
    return [ctx.command_path for _, ctx in command_tree()]


def test_cli_reference_is_generated_from_the_commands():
    current = open(CLI_MD, encoding="utf-8").read()
    assert current == generator().render(), (
        "docs/cli.md differs from the click commands: run "
        ".venv/bin/python scripts/gen_cli_reference.py (after scripts/setup.sh or "
        "pip install -e . when a command's entry point changed)")


def test_cli_reference_names_every_command_option_and_exit_code():
    text = open(CLI_MD, encoding="utf-8").read()
    for command, ctx in command_tree():
        section = text.split(f"\n## {ctx.command_path}\n", 1)
        assert len(section) == 2, ctx.command_path
        section = section[1].split("\n## ", 1)[0]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for opt in param.opts:
                    assert f"`{opt}" in section, (ctx.command_path, opt)
    assert "\n## Exit codes\n" in text
    for code in (0, 1, 2, 3, 6, 7, 8):
        assert re.search(rf"^\| {code} \| ", text, re.M), code


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built with ``mkdocs build --strict``; (directory, build output)."""
    if importlib.util.find_spec("mkdocs") is None or \
            importlib.util.find_spec("material") is None:
        pytest.fail("mkdocs and mkdocs-material are missing: scripts/setup.sh installs "
                    "them (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return str(out), proc


@pytest.mark.server  # mkdocs and chromium run as processes
def test_site_builds_strict(site):
    directory, proc = site
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "WARNING" not in log, log
    for page in ("index.html", "cli/index.html", "runbook/index.html",
                 "architecture/index.html", "search/search_index.json"):
        assert os.path.exists(os.path.join(directory, page)), page


@pytest.mark.server  # mkdocs and chromium run as processes
def test_readme_links_land(site):
    """Every relative link of README.md names a file that exists, and a docs page's
    anchor an id of the built page."""
    directory, proc = site
    assert proc.returncode == 0, proc.stdout + proc.stderr
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        assert os.path.exists(os.path.join(ROOT, path)), link
        if anchor and path.startswith("docs/") and path.endswith(".md"):
            page = path[len("docs/"):-len(".md")]
            html_path = os.path.join(directory, "index.html" if page == "index"
                                     else os.path.join(page, "index.html"))
            html = open(html_path, encoding="utf-8").read()
            assert f'id="{anchor}"' in html, link


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on loopback (the search runs in a web worker, which a
    file:// page may not start); its base URL."""
    directory, proc = site
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handler = functools.partial(QuietHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: commands in on fd 3, answers out on fd 4, each a JSON
    message ended by a NUL byte)."""

    def __init__(self, exe, profile, log):
        to_child, self._to_child = self._high(os.pipe())
        self._from_child, from_child = self._high(os.pipe())
        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-sync", "about:blank"]
        # the wrapper moves the pipe's ends to fds 3 and 4 (both ends were put above 9
        # first, so neither redirection overwrites the other)
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{to_child} 4>&{from_child} '
                           f'{to_child}<&- {from_child}>&-', "chromium", *args],
            pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
            stdout=log, stderr=log)
        os.close(to_child)
        os.close(from_child)
        self._buffer, self._next_id, self.session = b"", 0, None

    @staticmethod
    def _high(fds):
        import fcntl
        moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds)
        for fd in fds:
            os.close(fd)
        return moved

    def send(self, method, params=None, timeout=15, session=True):
        """The result of one command (on the attached page unless ``session`` is False)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _receive(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open_page(self):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.send("Target.attachToTarget", {"targetId": target["targetId"],
                                                           "flatten": True},
                                 session=False)["sessionId"]

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True})
        return result.get("result", {}).get("value")

    def goto(self, url, ready, timeout=15):
        """Load ``url``; the value of the JavaScript ``ready`` once it is truthy."""
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(ready)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{url}: gave up waiting for {ready}\n"
                                     + str(self.evaluate("document.body && "
                                                         "document.body.innerText")))
            time.sleep(0.1)

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


@pytest.fixture
def chromium(tmp_path):
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh installs it): "
                    "the built site is not opened in a browser")
    with open(tmp_path / "chromium.log", "wb") as log:
        browser = Chromium(exe, tmp_path / "profile", log)
        try:
            browser.open_page()
            yield browser
        finally:
            browser.close()


@pytest.mark.server  # mkdocs and chromium run as processes
def test_site_in_headless_chromium(served, chromium):
    # the front page: its title, heading, navigation by task and the support table
    page = json.loads(chromium.goto(served + "/", """
        document.readyState === 'complete' && document.querySelector('h1') &&
        JSON.stringify({title: document.title, h1: document.querySelector('h1').innerText,
                        nav: [...document.querySelectorAll('.md-nav__link')]
                             .map(a => a.innerText.trim()),
                        text: document.body.innerText})"""))
    assert page["title"].startswith("mysqlbackup"), page["title"]
    assert page["h1"].rstrip("¶ \n") == "mysqlbackup"
    for label in ("Getting started", "Backing up", "Restoring", "Finding the bad statement",
                  "Checking health", "Failover", "Operations", "Retention and drills",
                  "Disaster-recovery runbook", "Command line", "Architecture", "Benchmarks"):
        assert label in page["nav"], (label, page["nav"])
    assert "Durability guarantee" in page["text"]
    assert "MariaDB 10.11" in page["text"]  # the README's support table, included

    # the CLI reference: a heading for every command of the click tree
    cli = json.loads(chromium.goto(served + "/cli/", """
        document.readyState === 'complete' && document.querySelector('h1') &&
        JSON.stringify({h1: document.querySelector('h1').innerText,
                        ids: [...document.querySelectorAll('h2[id]')].map(h => h.id)})"""))
    assert cli["h1"].rstrip("¶ \n") == "Command-line reference"
    for path in command_paths():
        assert path.replace(" ", "-") in cli["ids"], (path, cli["ids"])
    assert "exit-codes" in cli["ids"]

    # the search (client-side, in a web worker): "restore" finds the restore pages
    found = json.loads(chromium.goto(served + "/?q=restore", """
        document.querySelectorAll('.md-search-result__item').length > 0 &&
        JSON.stringify({meta: document.querySelector('.md-search-result__meta').innerText,
                        links: [...document.querySelectorAll('.md-search-result__link')]
                               .map(a => a.getAttribute('href'))})""", timeout=20))
    assert "matching document" in found["meta"], found
    pages = {link[len(served):].lstrip("/").split("?")[0].split("#")[0]
             for link in found["links"] if link.startswith(served)}
    assert {"restoring/", "runbook/"} <= pages, found["links"]

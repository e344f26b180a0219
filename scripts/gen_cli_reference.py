"""Write docs/cli.md, the command-line reference, from the click command tree.

Every command and subcommand (the ``mysqlbackup.commands`` and
``mysqlbackup.archive_commands`` entry points included, loaded as ``mysqlbackup`` loads
them), its usage line and help text, every option with its metavar, default and help,
and the exit codes (mysqlbackup/errors.py). tests/test_docs.py fails when docs/cli.md
differs from what this prints.

    .venv/bin/python scripts/gen_cli_reference.py           # write docs/cli.md
    .venv/bin/python scripts/gen_cli_reference.py --check   # exit 1 when it is out of date
"""

import argparse
import inspect
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import click  # noqa: E402

OUTPUT = os.path.join(ROOT, "docs", "cli.md")
PROG = "mysqlbackup"
ENV_PREFIX = "MYSQLBACKUP"

HEADER = """\
# Command-line reference

Generated from the click commands by `scripts/gen_cli_reference.py`: do not edit by
hand. After changing a command, run `.venv/bin/python scripts/gen_cli_reference.py`
(`tests/test_docs.py` fails while this page differs from the commands).

Every command takes `-h`/`--help`. Every option can also come from the environment
(the variable named after it below; flags as `1`/`true`, repeatable options separated
by spaces) or from the TOML file given to `mysqlbackup --config FILE`; the command line
wins over the environment, which wins over the file (see
[Operations](operations.md#configuration-and-secrets)). Passwords never come from an
option: from a `--password-file` or the environment.
"""


def escape(text, block=False):
    """Plain text safe in Markdown (GitHub's and Python-Markdown's alike); ``block``:
    it starts a paragraph. RST literals (double backquotes) become code spans."""
    parts = text.split("``")
    out = []
    for i, part in enumerate(parts):
        if i % 2 and i < len(parts) - 1:
            out.append(f"`{part}`")
            continue
        for ch in "\\`*_[]":
            part = part.replace(ch, "\\" + ch)
        out.append(part.replace("<", "&lt;"))
    text = "".join(out)
    if block and (text[:1] in "#+-" or (text.split(".")[0].isdigit() and "." in text[:4])):
        text = "\\" + text
    return text


def paragraphs(help_text, block=True):
    """Markdown paragraphs of a click help text (``\\b`` blocks kept as written)."""
    out = []
    for para in inspect.cleandoc(help_text or "").split("\n\n"):
        if not para.strip():
            continue
        if para.startswith("\b\n"):
            out.append("```text\n" + para[2:] + "\n```")
        else:
            out.append(escape(" ".join(line.strip() for line in para.splitlines()), block))
    return out


def walk(command, ctx):
    """(command, context) of ``command`` and every command below it, in the order of
    ``list_commands`` (as ``mysqlbackup --help`` lists them)."""
    yield command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from walk(sub, click.Context(sub, info_name=name, parent=ctx))


def default_of(param):
    """The default as a user would write it, or None when there is none to show."""
    info = param.to_info_dict()
    value = info.get("default")
    if callable(param.default) or value is None:
        return None
    if getattr(param, "is_flag", False) and not getattr(param, "is_bool_flag", False):
        return None
    if getattr(param, "is_bool_flag", False):
        return None if value is False else "on"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value) if value else None
    return str(value)


def envvar_of(param, ctx):
    """The environment variable an option is read from (as config.name_envvars names it)."""
    if isinstance(param.envvar, str):
        return param.envvar
    if isinstance(param.envvar, (list, tuple)) and param.envvar:
        return param.envvar[0]
    if ctx.auto_envvar_prefix and param.allow_from_autoenv and param.name \
            and param.expose_value:
        return f"{ctx.auto_envvar_prefix}_{param.name.upper()}"
    return None


def option_line(param, ctx):
    """One list item: the option as typed, then its help and facts."""
    metavar = "" if getattr(param, "is_flag", False) and not param.count else \
        " " + param.make_metavar(ctx)
    head = ", ".join(f"`{o}{metavar}`" for o in param.opts + param.secondary_opts)
    facts = []
    if param.required:
        facts.append("Required.")
    if param.multiple:
        facts.append("Repeatable.")
    rng = getattr(param.type, "_describe_range", None)
    if rng is not None:
        facts.append(f"Range: `{rng()}`.")
    default = default_of(param)
    if default is not None:
        facts.append(f"Default: `{default}`.")
    env = envvar_of(param, ctx)
    if env:
        facts.append(f"Env: `{env}`.")
    text = " ".join(paragraphs(param.help, block=False)) if param.help else ""
    return "- " + head + ": " + " ".join(x for x in [text] + facts if x)


def command_section(command, ctx):
    path = ctx.command_path
    lines = [f"## {path}", ""]
    usage = " ".join([path] + command.collect_usage_pieces(ctx))
    lines += ["```text", usage, "```", ""]
    for para in paragraphs(command.help):
        lines += [para, ""]
    if command.epilog and ctx.parent is not None:  # the root's: the exit-code table
        for para in paragraphs(command.epilog):
            lines += [para, ""]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if arguments:
        lines += ["Arguments: " + ", ".join(
            f"`{p.make_metavar(ctx)}`" + (" (required)" if p.required else "")
            for p in arguments) + ".", ""]
    options = [p for p in command.params
               if isinstance(p, click.Option) and not p.hidden]
    if options:
        lines += ["Options:", ""]
        lines += [option_line(p, ctx) for p in options]
        lines.append("")
    if isinstance(command, click.Group):
        subs = [(n, command.get_command(ctx, n)) for n in command.list_commands(ctx)]
        lines += ["Commands:", ""]
        lines += [f"- [`{path} {n}`](#{anchor(f'{path} {n}')}): "
                  f"{escape(c.get_short_help_str(limit=300))}"
                  for n, c in subs if c is not None and not c.hidden]
        lines.append("")
    return lines


def anchor(heading):
    """The id Python-Markdown's toc (and GitHub) give a heading of plain words."""
    return heading.lower().replace(" ", "-")


def exit_code_rows():
    """(code, name, meaning) rows from mysqlbackup/errors.py: its ``exit_code_rows()`` or
    ``EXIT_CODES`` table when it has one, else each MysqlBackupError class of the module
    with its ``exit_code`` and its docstring's first line."""
    from mysqlbackup import errors
    rows_of = getattr(errors, "exit_code_rows", None)
    if callable(rows_of):
        return [(int(code), str(name), str(meaning)) for code, name, meaning in rows_of()]
    table = getattr(errors, "EXIT_CODES", None)
    if table:
        items = table.items() if isinstance(table, dict) else table
        return sorted((int(code), getattr(code, "name", ""), str(meaning))
                      for code, meaning in items)
    rows = []
    for c in vars(errors).values():
        if isinstance(c, type) and issubclass(c, errors.MysqlBackupError) \
                and c.__module__ == errors.__name__:
            doc = inspect.getdoc(c) or ""
            rows.append((int(c.exit_code), c.__name__, doc.splitlines()[0] if doc else ""))
    return sorted(rows, key=lambda r: r[0])


def exit_codes_section():
    lines = ["## Exit codes", "",
             "The exit codes of every command, from `mysqlbackup/errors.py`, unless a "
             "command's section below says otherwise. An error the tool raised on purpose "
             "is printed as one line (`mysqlbackup: error: ...`, or a JSON line under "
             "`--log-format json`); anything else is a bug and shows a traceback.", "",
             "| code | name | meaning |", "|---|---|---|"]
    for code, name, meaning in exit_code_rows():
        lines.append(f"| {code} | {f'`{name}`' if name else ''} | "
                     f"{escape(meaning).replace('|', '&#124;')} |")
    lines.append("")
    return lines


def render():
    """The text of docs/cli.md."""
    from mysqlbackup.cli import main
    root = click.Context(main, info_name=PROG, auto_envvar_prefix=ENV_PREFIX,
                         terminal_width=100, max_content_width=100)
    sections = list(walk(main, root))
    lines = HEADER.splitlines() + [""]
    lines += ["Commands: " + ", ".join(
        f"[`{ctx.command_path}`](#{anchor(ctx.command_path)})"
        for cmd, ctx in sections[1:] if not isinstance(cmd, click.Group)) + ".", ""]
    lines += exit_codes_section()
    for command, ctx in sections:
        lines += command_section(command, ctx)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/cli.md differs from the commands")
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        try:
            current = open(args.output, encoding="utf-8").read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{args.output} is out of date: run scripts/gen_cli_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

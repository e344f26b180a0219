"""Settings from a TOML config file and the environment, under the command line.

Every option of every command (plugins such as ``replay`` and ``restore`` and
nested commands such as ``archive ls`` included) can come from, in this order:

1. the command line;
2. the environment: ``MYSQLBACKUP_<COMMAND>_<OPTION>`` (``MYSQLBACKUP_STREAM_SOURCE``,
   ``MYSQLBACKUP_ARCHIVE_LS_ARCHIVE``; the group's own: ``MYSQLBACKUP_LOG_FORMAT``);
3. the config file (``mysqlbackup --config FILE COMMAND``, ``mysqlbackup COMMAND --config
   FILE`` or ``MYSQLBACKUP_CONFIG``): top-level keys go to every command that has the
   option, a table per command (``[stream]``, ``[archive.ls]``) to that command, winning
   over the top level (a renamed option's old spelling: only in its command's table);
4. the option's default.

click does the merging: the file becomes the context's ``default_map``, which click
consults after the command line and the environment. This module validates the
file against the commands (an unknown key, a value of the wrong kind or a password
is refused with one line naming the key and the file), validates the environment of
the command that runs the same way (``check_environment``: a variable under its
prefix that names no option of it), and resolves the settings ``mysqlbackup config
show`` prints (secrets masked).
"""

import difflib
import json
import os
import re

import click
from click.core import ParameterSource

from mysqlbackup.errors import UsageError, mask_url
from mysqlbackup.source.spec import PASSWORD_ENV

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ENV_PREFIX = "MYSQLBACKUP"
# where a password comes from when no --*password-file names it, in order
TARGET_PASSWORD_ENV = ("MYSQLBACKUP_TARGET_PASSWORD", PASSWORD_ENV)  # replay, restore
SERVE_PASSWORD_ENV = "MYSQLBACKUP_SERVE_PASSWORD"  # serve's replica login
# where a command's password comes from (never an option, never the config file)
PASSWORD_SOURCES = {"password_file": ("password", (PASSWORD_ENV,)),
                    "target_password_file": ("target-password", TARGET_PASSWORD_ENV),
                    "replica_password_file": ("replica-password", (SERVE_PASSWORD_ENV,))}
# variables under a command's prefix that are no option of it (check_environment)
NOT_OPTIONS = frozenset(env for _, names in PASSWORD_SOURCES.values() for env in names)


def load_toml(path):
    """The TOML file ``path`` as a dict; one-line UsageError when unreadable or invalid."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise UsageError(f"config file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"config file {path}: not valid TOML: {e}") from None


def options_of(command):
    """{long option name without dashes: click.Option} of a command."""
    found = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for opt in param.opts:
                if opt.startswith("--"):
                    found[opt[2:]] = param
    return found


def subcommands(command, ctx):
    """{name: command} under a group (plugins loaded), {} for a command."""
    if not isinstance(command, click.Group):
        return {}
    return {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}


def name_envvars(command, prefix):
    """Let each option be read from ``PREFIX_<OPTION NAME>`` (``--archive``:
    ``MYSQLBACKUP_STREAM_ARCHIVE``) where click's own name, made of the parameter's
    name, differs (``MYSQLBACKUP_STREAM_ARCHIVE_URL``, which still works too)."""
    prefix = prefix.upper().replace("-", "_")
    for name, param in options_of(command).items():
        env = f"{prefix}_{name.upper().replace('-', '_')}"
        if param.envvar is None and param.name and env != f"{prefix}_{param.name.upper()}":
            param.envvar = env
    for name, sub in getattr(command, "commands", {}).items():
        name_envvars(sub, f"{prefix}_{name}")


def envvars_of(command, prefix, aliases=True):
    """{variable: option} of every variable an option of ``command`` is read from under
    ``prefix`` (its own name, and click's of its parameter); ``aliases``: with those of
    hidden deprecated aliases."""
    found = {}
    for name, param in options_of(command).items():
        if not aliases and getattr(param, "alias_of", None):
            continue
        names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
        if param.name and param.allow_from_autoenv:
            names.append(f"{prefix}_{param.name.upper()}")
        found.update((env, f"--{name}") for env in names)
    return found


def check_environment(command, prefix, environ):
    """UsageError, in one line, for a variable ``PREFIX_<X>`` of ``environ`` that no
    option of ``command`` reads (a typo would be ignored otherwise), naming the nearest
    variable that is one. Not judged: variables of its subcommands (``base list``
    under ``base``), and those that are no option by design (NOT_OPTIONS)."""
    known = envvars_of(command, prefix)
    below = tuple(f"{prefix}_{name.upper().replace('-', '_')}_"
                  for name in getattr(command, "commands", {}))
    for name in sorted(environ):
        if not name.startswith(prefix + "_") or name in known or name in NOT_OPTIONS \
                or name.startswith(below):
            continue
        label = prefix[len(ENV_PREFIX) + 1:].lower().replace("_", " ")
        option = "--" + name[len(prefix) + 1:].lower().replace("_", "-")
        nearest = difflib.get_close_matches(name, sorted(envvars_of(command, prefix, False)),
                                            n=1, cutoff=0)
        raise UsageError(f"env {name}: unknown variable: {label} has no option {option}"
                         + (f" (did you mean {nearest[0]}?)" if nearest else ""))


def build_default_map(data, path, group, ctx):
    """click's ``default_map`` for ``group`` from the config file's ``data``: every key
    checked against the options of the commands it goes to."""
    return _node_map(group, (), data, {}, path, ctx)


def _node_map(command, where, table, shared, path, ctx):
    own, subs = options_of(command), subcommands(command, ctx)
    below = _names_below(command, ctx)
    shared, tables = dict(shared), _tables(table, subs, ctx)
    for key, value in table.items():
        if isinstance(value, dict) and (key in subs or _nested(key, subs, ctx)):
            continue
        name = key.replace("_", "-")
        _refuse_password(name, key, where, path)
        if name not in below:
            raise UsageError(_unknown(key, where, path, isinstance(value, dict)))
        shared[name] = (key, value, where)
    out = {}
    for name, (key, value, at) in shared.items():
        if name in own and (at == where or not getattr(own[name], "alias_of", None)):
            out[own[name].name] = check_value(own[name], value, _label(key, at, path))
    for name, sub in subs.items():
        out[name] = _node_map(sub, where + (name,), tables.get(name, {}), shared, path, ctx)
    return out


def _tables(table, subs, ctx):
    """{subcommand: its table}; a nested command's table may also be named in one key,
    ``["archive ls"]`` or ``[archive-ls]`` (TOML cannot hold both a top-level ``archive``
    URL and an ``[archive.ls]`` table)."""
    tables = {k: dict(v) for k, v in table.items() if isinstance(v, dict) and k in subs}
    for key, value in table.items():
        found = isinstance(value, dict) and key not in subs and _nested(key, subs, ctx)
        if found:
            tables.setdefault(found[0], {}).setdefault(found[1], {}).update(value)
    return tables


def _nested(key, subs, ctx):
    """(group, command) when ``key`` is "GROUP COMMAND" or "GROUP-COMMAND", else None."""
    for sep in (" ", "-"):
        head, _, rest = key.partition(sep)
        if rest and head in subs and rest in subcommands(subs[head], ctx):
            return head, rest
    return None


def _names_below(command, ctx):
    """Option names of a command, or of a group and every command under it."""
    names = set(options_of(command))
    for sub in subcommands(command, ctx).values():
        names |= _names_below(sub, ctx)
    return names


def _label(key, where, path):
    table = f"[{'.'.join(where)}] " if where else ""
    return f"config file {path}: {table}{key!r}"


def _unknown(key, where, path, is_table):
    if is_table:
        return f"config file {path}: unknown table [{'.'.join(where + (key,))}]: no such command"
    option = f"--{key.replace('_', '-')}"
    return f"{_label(key, where, path)}: unknown key: " + (
        f"{' '.join(where)} has no option {option}" if where
        else f"no command has an option {option}")


def _refuse_password(name, key, where, path):
    if name.endswith("password") or name.endswith("passwd"):
        # the password source whose label's prefix ("", "target-", "replica-") fits best
        param, (_, envs) = max(((p, v) for p, v in PASSWORD_SOURCES.items()
                                if name.startswith(v[0][:-len("password")])),
                               key=lambda item: len(item[1][0]))
        raise UsageError(f"{_label(key, where, path)}: a config file must not hold a "
                         f"password: name a {param.replace('_', '-')} there, or set "
                         f"{envs[0]} in the environment")


def check_value(param, value, label):
    """``value`` from the file as click will take it for ``param``, or a one-line
    UsageError (``label`` names the file, table and key)."""
    if param.multiple:
        if isinstance(value, dict):  # archive-option = { endpoint_url = "..." }
            value = [f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                     for k, v in value.items()]
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or any(isinstance(v, (dict, list)) for v in values):
            raise UsageError(f"{label}: expected a list of values")
    elif param.is_flag:
        if not isinstance(value, bool):
            raise UsageError(f"{label}: expected true or false")
        return value
    elif isinstance(value, (dict, list, bool)):
        raise UsageError(f"{label}: expected one value, not {type(value).__name__}")
    else:
        values = [value]
    for v in values:
        try:
            param.type.convert(v, param, None)
        except click.BadParameter as e:
            raise UsageError(f"{label}: {e.message}") from None
    return values if param.multiple else value


# -- config show --------------------------------------------------------------------------


def show_sections(root, words, given=False):
    """[(title, rows)] for ``config show [COMMAND [ARGS]]``: the group's own options,
    then each command (every command, or those under COMMAND) as it would run.
    ``given``: the file was named to ``config show --config`` (the group's options
    were resolved before it was read)."""
    path, chain, args = split_command(root.command, root, words)
    found = [(tuple(path), chain)]
    if not chain or isinstance(chain[-1][1], click.Group):
        under = chain[-1][1] if chain else root.command
        found = [(tuple(path), chain)] if chain and runs_itself(under) else []
        found += [(tuple(path) + p, chain + c) for p, c in leaf_commands(under, root)]
    return [("mysqlbackup", group_rows(root, given))] + [
        (" ".join(p), resolve(root, c, args)) for p, c in found]


def group_rows(root, given):
    """The group's own options (the config file itself first)."""
    config_path = root.meta.get("mysqlbackup.config")
    source = root.get_parameter_source("config_path")
    where = ("command line" if given or source == ParameterSource.COMMANDLINE
             else f"env {ENV_PREFIX}_CONFIG" if source == ParameterSource.ENVIRONMENT
             else "default")
    rows = [("config", config_path, where if config_path else "default")]
    for name, value, at in rows_of(root, config_path):
        key = name.replace("-", "_")
        if given and at == "default" and key in (root.default_map or {}):
            value, at = root.default_map[key], f"file {config_path}"
        rows.append((name, value, at))
    return rows


def split_command(group, ctx, tokens):
    """(path of command names, [(name, command) along it], remaining args) of
    ``config show COMMAND... ARGS``: names are taken while they name a subcommand."""
    path, chain, command = [], [], group
    tokens = list(tokens)
    while tokens and isinstance(command, click.Group) and not tokens[0].startswith("-"):
        sub = command.get_command(ctx, tokens[0])
        if sub is None:
            raise UsageError(f"no such command {' '.join(path + [tokens[0]])!r}")
        path.append(tokens.pop(0))
        chain.append((path[-1], sub))
        command = sub
    return path, chain, tokens


def leaf_commands(command, ctx, path=()):
    """[(path, [(name, command) along it])] of every command under ``command``."""
    found = []
    for name, sub in subcommands(command, ctx).items():
        if name == "config":
            continue
        if isinstance(sub, click.Group):
            found += [(path + (name,), [(name, sub)])] if runs_itself(sub) else []
            found += [(p, [(name, sub)] + c) for p, c in leaf_commands(sub, ctx, path + (name,))]
        else:
            found.append((path + (name,), [(name, sub)]))
    return found


def runs_itself(command):
    """True for a group that is a command too (``base``, beside ``base list``)."""
    return isinstance(command, click.Group) and command.invoke_without_command


def resolve(root, chain, args):
    """[(option name, value, where from)] of the last command of ``chain`` as it would
    run under ``root`` (the group's context) with ``args``; passwords: where from only."""
    ctx = root
    for name, command in chain[:-1]:
        ctx = click.Context(command, info_name=name, parent=ctx)
    name, command = chain[-1]
    if ctx.auto_envvar_prefix:  # a plugin under a nested group is named only when it runs
        name_envvars(command, f"{ctx.auto_envvar_prefix}_{name}")
    sub = command.make_context(name, list(args), parent=ctx, resilient_parsing=True)
    return rows_of(sub, root.meta.get("mysqlbackup.config"))


def rows_of(ctx, config_path):
    """The resolved options of one context, then where its passwords come from."""
    rows = []
    for name, param in options_of(ctx.command).items():
        if param.name not in ctx.params:
            continue
        value, alias_of = ctx.params[param.name], getattr(param, "alias_of", None)
        where = _where(ctx.get_parameter_source(param.name), param, ctx, config_path)
        if alias_of:  # a renamed option's old spelling: shown only when it is set
            if value not in (None, False, ()):
                rows.append((name, value, f"{where} (deprecated: use {alias_of})"))
            continue
        rows.append((name, value, where))
        if param.name in PASSWORD_SOURCES:
            rows.append(_password_row(param.name, value))
    return rows


def _where(source, param, ctx, config_path):
    if source == ParameterSource.COMMANDLINE:
        return "command line"
    if source == ParameterSource.ENVIRONMENT:
        return f"env {_envvar_used(param, ctx)}"
    if source == ParameterSource.DEFAULT_MAP:
        return f"file {config_path}"
    return "default"


def _envvar_used(param, ctx):
    names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
    if ctx.auto_envvar_prefix and param.name:
        names.append(f"{ctx.auto_envvar_prefix}_{param.name.upper()}")
    return next((n for n in names if os.environ.get(n)), names[0] if names else "?")


def _password_row(param_name, password_file):
    """(name, '***' or None, where from) of a password: its file, or an env variable."""
    label, env_names = PASSWORD_SOURCES[param_name]
    if password_file:
        return label, "***", f"{param_name.replace('_', '-')} {password_file}"
    found = next((n for n in env_names if n in os.environ), None)
    return label, ("***" if found else None), (f"env {found}" if found else "unset")


def format_rows(title, rows):
    """``[title]`` then ``key = value  # where from``, values masked, unset as (unset)."""
    lines = [f"[{title}]"]
    for name, value, where in rows:
        lines.append(f"{name} = {show_value(value)}  # {where}")
    return lines


def show_value(value):
    """A value as TOML-like text, with every URL's credentials masked."""
    if value is None or value == ():
        return "(unset)"
    if value == "***":
        return value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return json.dumps(masked(str(value)))


def rows_json(rows):
    """{option: {value, from}} of the rows (values masked)."""
    return {name: {"value": masked(value), "from": where} for name, value, where in rows}


def masked(value):
    """``value`` without credentials: URLs' user-info, and the value of a KEY=VALUE
    storage option whose key names a secret (``secret=``, ``key=``, ``token=``)."""
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    if not isinstance(value, str):
        return value
    key, eq, _ = value.partition("=")
    if eq and _SECRET_KEY.search(key):
        return f"{key}=***"
    return mask_url(value)


_SECRET_KEY = re.compile(r"(^|_)(key|secret|token|password|passwd|credentials?)($|_)", re.I)

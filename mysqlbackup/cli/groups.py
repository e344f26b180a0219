"""The ``mysqlbackup`` command groups: commands of other packages loaded through entry
points, ``--config FILE`` before or after the command name (moved before it, so that
it is the group's own option either way), and the environment checked when a
command runs (a ``MYSQLBACKUP_<COMMAND>_<X>`` variable naming no option
of the command is refused, as an unknown key of the config file is)."""

import functools
import os

import click

from mysqlbackup import config, logs
from mysqlbackup.cli.options import HELP_OPTIONS, fail, handle_errors
from mysqlbackup.errors import UsageError

CONFIG_OPTION = "--config"


class CommandGroup(click.Group):
    """The ``mysqlbackup`` group: the backup commands are defined in ``mysqlbackup.cli``;
    commands of other packages (``replay``) register under the ``mysqlbackup.commands``
    entry-point group (``mysqlbackup.archive_commands`` for ``mysqlbackup archive ...``)
    and are loaded only when listed or run, so this package never imports them."""

    plugin_group = "mysqlbackup.commands"

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(_plugins(self.plugin_group)))

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        plugins = _plugins(self.plugin_group)
        if command is None and name in plugins:
            command = plugins[name].load()
        # named under this group's own context only: config's walks ask a nested group
        # with the root's (``archive``'s ``find`` would be MYSQLBACKUP_FIND_*, and the
        # first naming of a command object stays)
        if command is not None and ctx.auto_envvar_prefix and ctx.command is self:
            config.name_envvars(command, f"{ctx.auto_envvar_prefix}_{name}")
        return command

    def parse_args(self, ctx, args):
        """The top group's: a ``--config FILE`` after the command name is its own."""
        if ctx.parent is None and not ctx.resilient_parsing:
            logs.configure()  # until the options say otherwise (an earlier run in-process)
            args = hoist_config(self, args)
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx, args):
        """click's, then (unless only completing or asked for help) the environment of
        the command that runs checked (``config.check_environment``)."""
        name, command, rest = super().resolve_command(ctx, args)
        if command is None or ctx.resilient_parsing:
            return name, command, rest
        if not any(a in HELP_OPTIONS for a in rest) and _runs_itself(command, rest):
            if ctx.parent is None:  # before the group's own callback: its logs first
                logs.configure(ctx.params["log_level"], ctx.params["log_format"])
            try:
                config.check_environment(command, env_prefix(ctx, name), os.environ)
            except UsageError as e:
                fail(e)
        return name, command, rest


class ArchiveGroup(CommandGroup):
    """``mysqlbackup archive``: its commands, and those registered under the
    ``mysqlbackup.archive_commands`` entry-point group."""

    plugin_group = "mysqlbackup.archive_commands"


class CommandWithSubcommands(CommandGroup):
    """A command that runs by itself (``base``) and also has subcommands (``base
    list``); no plugins."""

    plugin_group = None

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("invoke_without_command", True)
        super().__init__(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _plugins(group_name):
    """{name: entry point} of the installed entry points of ``group_name``, read once
    per process (a command line resolves its groups many times over)."""
    if group_name is None:
        return {}
    from importlib.metadata import entry_points
    found = entry_points()
    group = (found.select(group=group_name) if hasattr(found, "select")
             else found.get(group_name, ()))
    return {ep.name: ep for ep in group}


def env_prefix(ctx, name):
    """``MYSQLBACKUP_<COMMAND>`` of the command ``name`` under ``ctx`` (click's naming)."""
    return f"{ctx.auto_envvar_prefix}_{name}".upper().replace("-", "_")


def _runs_itself(command, rest):
    """True when ``command`` itself runs with ``rest``: a command, or a group that runs
    without a subcommand (``base``, not ``base list``); a group's subcommand is judged
    when that group resolves it."""
    if not isinstance(command, click.Group):
        return True
    return config.runs_itself(command) and not any(a in command.commands for a in rest)


@handle_errors
def read_config(ctx, param, path):
    """--config FILE: its settings become the commands' defaults (click's default_map,
    under the command line and the environment); checked against every command."""
    if path:
        ctx.default_map = config.build_default_map(config.load_toml(path), path,
                                                   ctx.command, ctx)
        ctx.meta["mysqlbackup.config"] = path
    return path


def hoist_config(group, args):
    """``args`` of the top ``group`` with a ``--config FILE`` given after the command name
    (``mysqlbackup stream --config f.toml``) moved before it: the group's own option,
    read as the same file the same way. Left alone for a command with a --config of
    its own (``config show``); given both before and after the name: refused."""
    at = _command_index(group, args)
    if at is None or _own_config(group, args[at:]):
        return args
    path, rest = _take_option(args[at + 1:], CONFIG_OPTION)
    if path is None:
        return args
    if _take_option(args[:at], CONFIG_OPTION)[0] is not None:
        fail(UsageError(f"{CONFIG_OPTION} given both before and after the command name: "
                        "give it once"))
    return args[:at] + [CONFIG_OPTION, path, args[at]] + rest


def _command_index(group, args):
    """Index in ``args`` of the command name (the first word that is no option of
    ``group`` nor an option's value), or None."""
    valued = {o for p in group.params if isinstance(p, click.Option) and not p.is_flag
              for o in p.opts}
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "--":
            return i + 1 if i + 1 < len(args) else None
        elif arg.startswith("-"):
            skip = arg in valued
        else:
            return i
    return None


def _own_config(group, words):
    """True when the command ``words`` name under ``group`` has a --config of its own."""
    command, words = group, list(words)
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command = command.commands[words.pop(0)]
    return command is not group and CONFIG_OPTION[2:] in config.options_of(command)


def _take_option(args, option):
    """(value, the other args) of ``option VALUE`` or ``option=VALUE`` in ``args``
    (up to a ``--``); (None, args) when it is not there."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == option and i + 1 < len(args):
            return args[i + 1], args[:i] + args[i + 2:]
        if arg.startswith(option + "="):
            return arg[len(option) + 1:], args[:i] + args[i + 1:]
    return None, args

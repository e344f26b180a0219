"""Settings from the environment and a TOML config file: command line > environment >
file > default, for the backup commands, the plugin commands (replay, restore) and the
nested ones (archive ls); refused files (one line naming the key and the file) and
``mysqlbackup config show`` (values, where they come from, secrets masked)."""

import json

import pytest
from click.testing import CliRunner

from mysqlbackup.cli import main


def invoke(*args, env=None):
    return CliRunner().invoke(main, list(args), env={"MYSQLBACKUP_PASSWORD": "pw-from-env",
                                                     **(env or {})})


def write(tmp_path, text, name="db1.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_precedence_command_line_env_file(tmp_path):
    config = write(tmp_path, f'[status]\ndir = "{tmp_path}/file"\n')
    assert invoke("--config", config, "status").output == f"{tmp_path}/file: no such directory\n"
    env = {"MYSQLBACKUP_STATUS_DIR": f"{tmp_path}/env"}
    assert invoke("--config", config, "status", env=env).output == \
        f"{tmp_path}/env: no such directory\n"
    assert invoke("--config", config, "status", "--dir", f"{tmp_path}/cli", env=env).output == \
        f"{tmp_path}/cli: no such directory\n"
    # the file named by the environment instead of --config
    result = invoke("status", env={"MYSQLBACKUP_CONFIG": config})
    assert (result.exit_code, result.output) == (1, f"{tmp_path}/file: no such directory\n")


def test_top_level_keys_go_to_every_command_the_table_wins(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    config = write(tmp_path, f'archive = "file://{empty}"\nsource-name = "db7"\n'
                             '[restore]\nsource_name = "db8"\ndry-run = true\n')
    # a plugin command (loaded through the entry point) takes the file's values
    result = invoke("--config", config, "restore")
    assert result.exit_code == 10  # ExitCode.NO_SUCH_SOURCE
    assert result.stderr == f"mysqlbackup: error: archive file://{empty}: no source 'db8' " \
                            "in it (it is empty: nothing archived yet)\n"
    result = invoke("--config", config, "replay", "--sql", str(tmp_path / "x.sql"))
    assert result.stderr == f"mysqlbackup: error: archive file://{empty}: no source 'db7' " \
                            "in it (it is empty: nothing archived yet)\n"


def test_env_reaches_plugin_and_nested_commands(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("restore", env={"MYSQLBACKUP_RESTORE_ARCHIVE": f"file://{empty}",
                                    "MYSQLBACKUP_RESTORE_DRY_RUN": "1",
                                    "MYSQLBACKUP_RESTORE_SOURCE_NAME": "db9"})
    assert result.stderr == f"mysqlbackup: error: archive file://{empty}: no source 'db9' " \
                            "in it (it is empty: nothing archived yet)\n"
    for name in ("MYSQLBACKUP_ARCHIVE_LS_ARCHIVE", "MYSQLBACKUP_ARCHIVE_LS_ARCHIVE_URL"):
        result = invoke("archive", "ls", env={name: f"file://{empty}"})
        assert (result.exit_code, result.output) == (0, (
            f"archive file://{empty} is empty: nothing archived yet (stream --archive and "
            "base write to it)\n")), name
    # a flag from the environment, and from the file's table for a nested command
    result = invoke("archive", "ls", env={"MYSQLBACKUP_ARCHIVE_LS_ARCHIVE": f"file://{empty}",
                                          "MYSQLBACKUP_ARCHIVE_LS_JSON": "true"})
    assert json.loads(result.output)["files"] == []
    config = write(tmp_path, f'archive = "file://{empty}"\n["archive ls"]\njson = true\n')
    assert json.loads(invoke("--config", config, "archive", "ls").output)["windows"] == []


@pytest.mark.parametrize("text, message", [
    ('password = "x"\n', "'password': a config file must not hold a password: name a "
     "password-file there, or set MYSQLBACKUP_PASSWORD in the environment"),
    ('[restore]\ntarget_password = "x"\n', "[restore] 'target_password': a config file must "
     "not hold a password: name a target-password-file there, or set "
     "MYSQLBACKUP_TARGET_PASSWORD in the environment"),
    ('sorce = "mysql://r@h"\n', "'sorce': unknown key: no command has an option --sorce"),
    ('[stream]\nmethod = "dump"\n', "[stream] 'method': unknown key: stream has no option "
     "--method"),
    ('[strem]\nsource = "mysql://r@h"\n', "unknown table [strem]: no such command"),
    ('[stream]\nserver-id = "abc"\n', "[stream] 'server-id': 'abc' is not a valid integer "
     "range."),
    ('[stream]\nno_semi_sync = "yes"\n', "[stream] 'no_semi_sync': expected true or false"),
    ('[stream]\nsource = ["a", "b"]\n', "[stream] 'source': expected one value, not list"),
    ('log-format = "xml"\n', "'log-format': 'xml' is not one of 'text', 'json'."),
    ('[stream\n', "not valid TOML: Expected ']' at the end of a table declaration (at line 1, "
     "column 8)"),
])
def test_refused_files_say_which_key_of_which_file(tmp_path, text, message):
    config = write(tmp_path, text)
    result = invoke("--config", config, "status", "--dir", str(tmp_path))
    assert (result.exit_code, result.stderr) == (2, f"mysqlbackup: error: config file "
                                                    f"{config}: {message}\n")


def test_missing_file(tmp_path):
    result = invoke("--config", str(tmp_path / "nope.toml"), "status", "--dir", str(tmp_path))
    assert (result.exit_code, result.stderr) == (2, "mysqlbackup: error: config file "
                                                    f"{tmp_path}/nope.toml: No such file or "
                                                    "directory\n")


def test_config_show_sources_and_masking(tmp_path):
    config = write(tmp_path, 'archive = "s3://AKIAEXAMPLE:wJalrSecret@bucket/backups"\n'
                             'archive-option = { endpoint_url = "http://127.0.0.1:9000", '
                             'secret = "wJalrSecret" }\nlog-format = "json"\n'
                             '[stream]\nsource = "mysql://repl@db1:3306"\nserver_id = 901\n'
                             'dir = "/var/lib/mysqlbackup/db1"\n'
                             'password-file = "/etc/mysqlbackup/db1.password"\n')
    result = invoke("--config", config, "config", "show", "stream", "--heartbeat", "2",
                    env={"MYSQLBACKUP_STREAM_SERVER_ID": "902",
                         "MYSQLBACKUP_STREAM_KEEP_LOCAL": "10"})
    assert result.exit_code == 0, result.output
    assert "wJalrSecret" not in result.output and "AKIAEXAMPLE" not in result.output
    lines = result.output.splitlines()
    assert lines[:4] == ["[mysqlbackup]", f'config = "{config}"  # command line',
                         'log-level = "info"  # default', f'log-format = "json"  # file {config}']
    stream = lines[lines.index("[stream]"):]
    expected = [
        f'source = "mysql://repl@db1:3306"  # file {config}',
        f'password-file = "/etc/mysqlbackup/db1.password"  # file {config}',
        "password = ***  # password-file /etc/mysqlbackup/db1.password",
        "server-id = 902  # env MYSQLBACKUP_STREAM_SERVER_ID",
        f'dir = "/var/lib/mysqlbackup/db1"  # file {config}',
        "start-file = (unset)  # default",
        "heartbeat = 2.0  # command line",
        f'archive = "s3://***@bucket/backups"  # file {config}',
        f'archive-option = ["endpoint_url=http://127.0.0.1:9000", "secret=***"]  # file {config}',
        'keep-local = "10"  # env MYSQLBACKUP_STREAM_KEEP_LOCAL',
    ]
    for line in expected:
        assert line in stream, line


def test_config_show_json_of_a_plugin_command_and_passwords_from_env(tmp_path):
    result = invoke("config", "show", "--json", "restore",
                    env={"MYSQLBACKUP_RESTORE_TARGET": "mysql://admin@restore:3306",
                         "MYSQLBACKUP_TARGET_PASSWORD": "Sup3r-Secret-Pw"})
    assert result.exit_code == 0, result.output
    assert "Sup3r-Secret-Pw" not in result.output and "pw-from-env" not in result.output
    data = json.loads(result.output)
    assert list(data) == ["mysqlbackup", "restore"]
    assert data["restore"]["target"] == {"value": "mysql://admin@restore:3306",
                                         "from": "env MYSQLBACKUP_RESTORE_TARGET"}
    assert data["restore"]["target-password"] == {"value": "***",
                                                  "from": "env MYSQLBACKUP_TARGET_PASSWORD"}
    assert data["restore"]["workers"] == {"value": 4, "from": "default"}


def test_config_show_every_command(tmp_path):
    config = write(tmp_path, 'source-name = "db1"\n')
    result = invoke("config", "show", "--config", config)
    assert result.exit_code == 0, result.output
    titles = [line for line in result.output.splitlines() if line.startswith("[")]
    assert titles[0] == "[mysqlbackup]"
    assert {"[stream]", "[base]", "[status]", "[verify]", "[archive ls]", "[archive import]",
            "[replay]", "[restore]"} <= set(titles)
    assert result.output.count(f'source-name = "db1"  # file {config}') >= 5


def test_a_config_file_leaves_a_nested_plugins_environment_its_name(tmp_path):
    # reading the file walks every command: ``archive find`` (a plugin of a nested group)
    # kept MYSQLBACKUP_FIND_* from that walk, and its MYSQLBACKUP_ARCHIVE_FIND_* went unread
    from_file, from_env = tmp_path / "file", tmp_path / "env"
    from_file.mkdir()
    from_env.mkdir()
    config = write(tmp_path, f'archive = "file://{from_file}"\n')
    result = invoke("--config", config, "archive", "find",
                    env={"MYSQLBACKUP_ARCHIVE_FIND_ARCHIVE": f"file://{from_env}"})
    assert f"file://{from_env}" in result.output and str(from_file) not in result.output, \
        result.output


def test_config_show_reads_a_nested_plugins_environment(monkeypatch):
    # ``archive find`` (a plugin of a nested group) is named only when it runs: as in a
    # fresh process, its options start unnamed, and config show must name them itself
    from mysqlbackup.cli.groups import _plugins
    find = _plugins("mysqlbackup.archive_commands")["find"].load()
    for param in find.params:
        monkeypatch.setattr(param, "envvar", None)
    env = {"MYSQLBACKUP_ARCHIVE_FIND_ARCHIVE": "file:///from/env"}
    for words in (["archive", "find"], []):
        result = invoke("config", "show", *words, env=env)
        assert result.exit_code == 0, result.output
        assert ('[archive find]\narchive = "file:///from/env"  # env '
                'MYSQLBACKUP_ARCHIVE_FIND_ARCHIVE\n') in result.output, words

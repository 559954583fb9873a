"""plugin_bridge/install.py and the ``autoretry bridge`` commands."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from opencode_autoretry.cli.main import main
from opencode_autoretry.plugin_bridge import install
from opencode_autoretry.plugin_bridge.install import COMMAND, PLUGIN, Action, FileState

SHIPPED_JS = PLUGIN.content()
SHIPPED_MD = COMMAND.content()


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_shipped_files_are_the_ones_in_the_checkout():
    here = Path(__file__).parent.parent / "plugin_bridge"
    assert (here / "autoretry.js").read_bytes() == SHIPPED_JS
    for helper in install.HELPERS:
        assert (here / helper.name).read_bytes() == helper.content()
    assert (here / "autoretry.md").read_bytes() == SHIPPED_MD
    assert SHIPPED_JS.startswith(install.PLUGIN_SIGNATURE)
    assert b"$ARGUMENTS" in SHIPPED_MD


HELPER_TARGETS = [
    "plugins/autoretry/books.js",
    "plugins/autoretry/coalesce.js",
    "plugins/autoretry/framing.js",
    "plugins/autoretry/messages.js",
    "plugins/autoretry/socket.js",
    "plugins/autoretry/wire.js",
    "plugins/autoretry/history.js",
]
H = len(HELPER_TARGETS)
FILES = H + 2  # the helpers, the plugin, the command file
NEW, C, U, K, R = (Action.INSTALLED, Action.UNCHANGED, Action.UPDATED, Action.KEPT, Action.REPLACED)


@pytest.mark.parametrize(
    ("plugin", "command", "force", "expected"),
    [
        (None, None, False, [NEW] * FILES),
        (SHIPPED_JS, SHIPPED_MD, False, [C] * FILES),
        (b"// opencode-autoretry bridge v0\n", SHIPPED_MD, False, [*[C] * H, U, C]),
        (b"export default {}\n", b"my own\n", False, [*[C] * H, K, K]),
        (b"export default {}\n", b"my own\n", True, [*[C] * H, R, R]),
    ],
)
def test_install(tmp_path, plugin, command, force, expected):
    if plugin is not None:  # an earlier install: the helpers are there and current
        for helper in install.HELPERS:
            write(helper.target(tmp_path), helper.content())
        write(PLUGIN.target(tmp_path), plugin)
    if command is not None:
        write(COMMAND.target(tmp_path), command)
    steps = install.install(tmp_path, force=force)
    assert [s.action for s in steps] == expected
    assert [s.target for s in steps] == [
        *(tmp_path / t for t in HELPER_TARGETS),
        tmp_path / "plugins/autoretry.js",
        tmp_path / "command/autoretry.md",
    ], "helpers first: the plugin must never import a helper that is not there yet"
    kept = {s.target for s in steps if s.action is Action.KEPT}
    for file in install.SHIPPED:
        if file.target(tmp_path) not in kept:
            assert file.target(tmp_path).read_bytes() == file.content()
    assert not list(tmp_path.rglob(".*.tmp-*")), "no temporary file left behind"


@pytest.mark.parametrize(
    ("existing", "force", "expected"),
    [
        (b"// opencode-autoretry bridge: wire helpers v0\n", False, Action.UPDATED),
        (b"export const mine = 1\n", False, Action.KEPT),
        (b"export const mine = 1\n", True, Action.REPLACED),
    ],
)
def test_helper_modules_follow_the_plugin_rules(tmp_path, existing, force, expected):
    helper = install.HELPERS[0]
    write(helper.target(tmp_path), existing)
    assert install.install(tmp_path, force=force)[0].action is expected


def test_every_helper_module_in_the_package_is_shipped():
    """A module split out of the bridge but left out of HELPERS would be missing from every
    install: the plugin's import of it would fail and OpenCode would run without the bridge."""
    here = Path(__file__).parent.parent / "plugin_bridge" / "autoretry"
    assert sorted(f"autoretry/{p.name}" for p in here.glob("*.js")) == sorted(
        h.name for h in install.HELPERS
    )


def test_helpers_live_where_opencode_does_not_load_plugins(tmp_path):
    """OpenCode 1.18 loads ``{plugin,plugins}/*.{ts,js}`` (one level): only our plugin file
    may match that glob; the helpers sit one folder below it."""
    install.install(tmp_path)
    loaded = sorted(p.relative_to(tmp_path) for p in tmp_path.glob("plugins/*.js"))
    assert loaded == [Path("plugins/autoretry.js")]
    for helper in install.HELPERS:
        assert helper.target(tmp_path).parent == tmp_path / "plugins" / "autoretry"
        assert helper.content().startswith(install.PLUGIN_SIGNATURE)
        name = helper.name.split("/")[-1]
        assert f'from "./autoretry/{name}"'.encode() in SHIPPED_JS, f"the plugin imports {name}"


def test_a_previously_shipped_command_file_counts_as_outdated(tmp_path, monkeypatch):
    old = b"---\ndescription: old\n---\n$ARGUMENTS\n"
    monkeypatch.setattr(
        install, "PREVIOUS_COMMAND_SHA256", frozenset({hashlib.sha256(old).hexdigest()})
    )
    write(COMMAND.target(tmp_path), old)
    assert install.file_status(COMMAND, tmp_path).state is FileState.OUTDATED
    assert install.install(tmp_path)[-1].action is Action.UPDATED


@pytest.mark.parametrize(
    ("command", "force", "expected", "left"),
    [
        (SHIPPED_MD, False, [Action.REMOVED] * FILES, False),
        (b"my own\n", False, [Action.KEPT, *[Action.REMOVED] * (FILES - 1)], True),
        (b"my own\n", True, [Action.REMOVED] * FILES, False),
    ],
)
def test_uninstall(tmp_path, command, force, expected, left):
    install.install(tmp_path)
    write(COMMAND.target(tmp_path), command)
    steps = install.uninstall(tmp_path, force=force)
    assert [s.action for s in steps] == expected
    assert [s.target for s in steps][1:] == [
        tmp_path / "plugins/autoretry.js", *(tmp_path / t for t in reversed(HELPER_TARGETS))
    ], "the plugin goes before the helpers it imports"
    assert not PLUGIN.target(tmp_path).exists()
    assert not (tmp_path / "plugins" / "autoretry").exists(), "the emptied helper folder too"
    assert COMMAND.target(tmp_path).exists() == left
    assert [s.action for s in install.uninstall(tmp_path)][-1] is Action.ABSENT


def test_uninstall_leaves_a_helper_folder_holding_something_else(tmp_path):
    install.install(tmp_path)
    write(tmp_path / "plugins" / "autoretry" / "notes.txt", b"mine")
    install.uninstall(tmp_path)
    assert (tmp_path / "plugins" / "autoretry" / "notes.txt").read_bytes() == b"mine"


def test_duplicate_plugin_in_the_singular_folder_is_reported(tmp_path):
    write(tmp_path / "plugin" / "autoretry.js", SHIPPED_JS)
    assert install.duplicate_plugins(tmp_path) == [tmp_path / "plugin" / "autoretry.js"]


@pytest.fixture
def short_dir():
    directory = Path(tempfile.mkdtemp(prefix="ar-i-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_socket_alive(short_dir):
    path = short_dir / "d.sock"
    assert not install.socket_alive(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    try:
        assert install.socket_alive(path)
    finally:
        listener.close()


def test_cli_install_status_uninstall(tmp_path, short_dir, monkeypatch):
    monkeypatch.setenv("AUTORETRY_SOCKET", str(short_dir / "none.sock"))
    monkeypatch.setenv("AUTORETRY_CONFIG", str(tmp_path / "no-config.toml"))
    runner = CliRunner()
    config = ["--opencode-config", str(tmp_path / "oc")]

    first = runner.invoke(main, ["bridge", "install", *config])
    again = runner.invoke(main, ["bridge", "install", *config])
    status = runner.invoke(main, ["bridge", "status", *config, "--json"])
    removed = runner.invoke(main, ["bridge", "uninstall", *config])

    assert first.exit_code == 0, first.output
    assert first.output.count("installed") == FILES and "Restart" in first.output
    assert again.output.count("unchanged") == FILES and "Restart" not in again.output
    report = json.loads(status.output)
    assert {k: v["state"] for k, v in report["files"].items()} == {
        **{t.removeprefix("plugins/"): "current" for t in HELPER_TARGETS},
        "autoretry.js": "current",
        "autoretry.md": "current",
    }
    assert (report["daemon_alive"], report["socket"]) == (False, str(short_dir / "none.sock"))
    assert removed.output.count("removed") == FILES


def test_cli_default_config_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    result = CliRunner().invoke(main, ["bridge", "install"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "opencode" / "plugins" / "autoretry.js").exists()
    assert (tmp_path / "opencode" / "plugins" / "autoretry" / "wire.js").exists()
    assert (tmp_path / "opencode" / "command" / "autoretry.md").exists()


def test_every_earlier_shipped_command_file_is_recorded_as_ours():
    """Issue 20: an unedited /autoretry command file of an earlier release must read as
    outdated (replaced on upgrade), not customised. Every version of autoretry.md in the
    history other than the current one must have its sha256 in PREVIOUS_COMMAND_SHA256."""
    import subprocess

    from opencode_autoretry.plugin_bridge import install

    repo = Path(__file__).resolve().parents[1]
    source = "plugin_bridge/autoretry.md"
    listed = subprocess.run(["git", "-C", str(repo), "log", "--format=%H", "--", source],
                            capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    current = install.COMMAND.content()
    earlier = set()
    for commit in listed.stdout.split():
        shown = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{source}"],
                               capture_output=True, check=True)
        if shown.stdout != current:
            earlier.add(hashlib.sha256(shown.stdout).hexdigest())
    assert earlier <= install.PREVIOUS_COMMAND_SHA256, "record the old checksums in install.py"
    assert hashlib.sha256(current).hexdigest() not in install.PREVIOUS_COMMAND_SHA256

# An install as users get it: `meson install --destdir` of this build (no rebuild), then its man page, bash
# completion, helpers off PATH, version header, and a job run by the installed programs.
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD_DIR, CANOPY, REPO

sys.path.insert(0, str(REPO / "launcher" / "completion"))
from make_completion import help_options   # noqa: E402  (the one reader of --help's option lines)

MESON = shutil.which("meson")
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")


def meson_introspect(*what):
    result = subprocess.run([MESON, "introspect", str(BUILD_DIR), *what], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"meson introspect {' '.join(what)} failed:\n{result.stderr}"
    return json.loads(result.stdout)


class Install:
    """The build installed under a temporary DESTDIR: where each installed file landed, and meson's directories."""

    def __init__(self, destdir: Path):
        self.destdir = destdir
        result = subprocess.run([MESON, "install", "-C", str(BUILD_DIR), "--no-rebuild", "--quiet",
                                 "--destdir", str(destdir)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"meson install failed (build first: ninja -C {BUILD_DIR}):\n{result.stderr}"
        # {file in the build or source tree: its path after install}, as meson computed it for this prefix.
        self.installed = meson_introspect("--installed")
        options = {option["name"]: option["value"] for option in meson_introspect("--buildoptions")}
        self.prefix = Path(options["prefix"])
        self.version = meson_introspect("--projectinfo")["version"]
        for name in ("bindir", "libexecdir", "mandir", "includedir", "datadir"):
            setattr(self, name, self.staged(self.prefix / options[name]))

    def staged(self, path):
        """Where an installed path is under DESTDIR."""
        return self.destdir / Path(path).relative_to("/")

    def file_from(self, build_path):
        """The staged path of the file installed from `build_path` (relative to the build dir), or None."""
        path = self.installed.get(str(BUILD_DIR / build_path))
        return self.staged(path) if path else None


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    assert MESON, "meson is not on PATH"
    return Install(tmp_path_factory.mktemp("destdir"))


def help_text():
    return subprocess.run([str(CANOPY), "--help"], capture_output=True, text=True, timeout=10, check=True).stdout


def test_man_page_is_installed_and_lists_every_long_option(install):
    page = install.file_from("docs/canopy.1")
    if page is None and not shutil.which("help2man"):
        pytest.skip("help2man is not installed, so meson built no man page (tests/setup-deps.sh installs it)")
    assert page is not None, "meson installs no canopy.1 although help2man is installed; reconfigure the build"
    assert page.parent == install.mandir / "man1" and page.is_file(), page
    # Plain text: no font changes (\fB, \fR, \f(CW), italic corrections or escaped dashes.
    text = re.sub(r"\\f(\(..|\[[^]]*\]|.)|\\[,/&]", "", page.read_text()).replace("\\-", "-")
    assert text.startswith(".\\\" DO NOT MODIFY THIS FILE!") and ".TH CANOPY" in text, text[:300]
    long_options = {spelling for spellings, _ in help_options(help_text()) for spelling in spellings
                    if spelling.startswith("--")}
    missing = sorted(option for option in long_options if not re.search(rf"(?<![\w-]){option}(?![\w-])", text))
    assert not missing, f"{page} lacks these options of canopy --help: {missing}"


def test_bash_completion_is_installed_with_every_option(install):
    script = install.file_from("launcher/completion/canopy")
    assert script is not None, "meson installs no bash completion for canopy"
    assert script.name == "canopy" and script.parent.parts[-2:] == ("bash-completion", "completions"), script
    assert str(script).startswith(str(install.datadir)), f"{script} is outside the install's datadir"
    text = script.read_text()
    options = [spelling for spellings, _ in help_options(help_text()) for spelling in spellings]
    missing = [option for option in options if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)]
    assert not missing, f"{script} lacks these options of canopy --help: {missing}"


def complete(script, words, cwd):
    """What bash completion offers for the last of `words` (a partial word, or '' for a new one)."""
    program = (f"source {BASH_COMPLETION}; source {script}\n"
               'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}\n'
               '_canopy canopy "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
               'printf "%s\\n" "${COMPREPLY[@]}"\n')
    result = subprocess.run(["bash", "-c", program, "bash", *words], capture_output=True, text=True, timeout=30,
                            cwd=cwd)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_bash_completion_completes_options_and_their_values(install, tmp_path):
    if not BASH_COMPLETION.exists():
        pytest.skip(f"{BASH_COMPLETION} is missing (apt install bash-completion)")
    script = install.file_from("launcher/completion/canopy")
    (tmp_path / "hosts.txt").write_text("n1\n")
    (tmp_path / "run").mkdir()
    assert complete(script, ["canopy", "--sim-n"], tmp_path) == {"--sim-nodes"}
    assert complete(script, ["canopy", "-f", "ho"], tmp_path) == {"hosts.txt"}
    assert complete(script, ["canopy", "--hostfile=ho"], tmp_path) == {"hosts.txt"}
    assert complete(script, ["canopy", "--agent", ""], tmp_path) == {"ssh", "rsh", "local", "exec:"}
    assert complete(script, ["canopy", "--pmix", ""], tmp_path) == {"on", "eager", "off"}
    assert complete(script, ["canopy", "--wdir", ""], tmp_path) == {"run"}
    # After the program, its own arguments: canopy's options are not offered there.
    assert "--sim-nodes" not in complete(script, ["canopy", "-n", "2", "true", "--sim"], tmp_path)


def test_helpers_are_in_libexecdir_and_not_on_path(install):
    guard = install.file_from("daemon/canopy-guard")
    assert guard is not None, "meson installs no canopy-guard"
    assert guard.parent == install.libexecdir / "canopy" and os.access(guard, os.X_OK), guard
    assert not (install.bindir / "canopy-guard").exists(), f"canopy-guard is on PATH in {install.bindir}"
    # canopy finds canopyd beside itself, and remote nodes may start it by name: both stay in bindir.
    assert sorted(path.name for path in install.bindir.iterdir()) == ["canopy", "canopyd"]


def test_installed_canopy_runs_a_job_with_the_installed_daemon_and_guard(install, sandbox):
    # Each rank prints its daemon's program and the programs of the daemon's other children: the guard among them.
    show = "readlink /proc/$PPID/exe; for c in $(cat /proc/$PPID/task/*/children); do readlink /proc/$c/exe; done; true"
    result = subprocess.run([str(install.bindir / "canopy"), "--sim-nodes", "2", "-n", "4", "sh", "-c", show],
                            env=sandbox.env, cwd=sandbox.root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result
    assert "ranks may outlive a crashed daemon" not in result.stderr, result.stderr
    seen = set(result.stdout.split())
    assert str(install.bindir / "canopyd") in seen, f"the ranks' daemon is not the installed canopyd: {seen}"
    guard = install.libexecdir / "canopy" / "canopy-guard"
    assert str(guard) in seen, f"the daemons did not start the installed guard {guard}: {seen}"
    elsewhere = [path for path in seen if "canopy" in Path(path).name and not path.startswith(str(install.destdir))]
    assert not elsewhere, f"canopy programs from outside the install ran: {elsewhere}"


def test_version_is_the_project_version_everywhere(install):
    result = subprocess.run([str(install.bindir / "canopy"), "--version"], capture_output=True, text=True, timeout=10)
    assert result.stdout == f"canopy {install.version}\n", result
    header = (install.includedir / "canopy" / "version.h").read_text()
    defines = dict(re.findall(r"#define (CANOPY_VERSION\w*) (\S+)", header))
    assert defines.get("CANOPY_VERSION") == f'"{install.version}"', header
    parts = [defines.get(f"CANOPY_VERSION_{part}") for part in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(str(part) for part in parts) == install.version, header

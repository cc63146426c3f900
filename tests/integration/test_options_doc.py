# The docs and --help agree: every spelling of every option of `canopy --help` has a row in docs/options.md, and every
# option a row there names is one that --help lists.
import re
from pathlib import Path
import subprocess
import sys

from conftest import CANOPY, REPO

sys.path.insert(0, str(REPO / "launcher" / "completion"))
from make_completion import help_options   # noqa: E402  (the one reader of --help's option lines)

REFERENCE = REPO / "docs" / "options.md"


def help_spellings():
    """{spelling: the --help group it is listed in}, for every option canopy --help lists."""
    text = subprocess.run([str(CANOPY), "--help"], capture_output=True, text=True, timeout=10, check=True).stdout
    # A group is a heading such as "Job:" and the option lines under it.
    parts = re.split(r"(?m)^(\S[^\n]*):\n", text)
    found = {spelling: group for group, lines in zip(parts[1::2], parts[2::2])
             for spellings, _ in help_options(lines) for spelling in spellings}
    assert found, f"no option lines found in canopy --help:\n{text}"
    return found


def reference_rows():
    """{spelling: (line number, heading)} for the options named in the first cell of each table row."""
    rows, heading = {}, None
    for number, line in enumerate(REFERENCE.read_text().splitlines(), 1):
        if line.startswith("## "):
            heading = line[3:]
        if not line.startswith("|"):
            continue
        first_cell = line.split("|")[1]
        for spelling in re.findall(r"`(-[^`\s]*)`", first_cell):
            rows[spelling] = (number, heading)
    return rows


def test_every_option_of_help_is_in_the_reference():
    documented = reference_rows()
    missing = [f"{spelling} (in --help under '{group}')" for spelling, group in help_spellings().items()
               if spelling not in documented]
    assert not missing, (
        f"{REFERENCE.relative_to(REPO)} has no row for these options that canopy --help lists; add each spelling to "
        f"the first column of the table under the same heading, with its value and what it does:\n  " +
        "\n  ".join(missing))


def test_every_option_in_the_reference_is_in_help():
    known = help_spellings()
    stale = [f"{spelling} (line {number}, section '{heading}')"
             for spelling, (number, heading) in reference_rows().items() if spelling not in known]
    assert not stale, (
        f"{REFERENCE.relative_to(REPO)} names these options, but canopy --help does not list them; remove the "
        f"spelling or fix it:\n  " + "\n  ".join(stale))


def test_the_reference_is_linked_from_the_readme():
    assert "docs/options.md" in (REPO / "README.md").read_text(), "README.md should link docs/options.md"


def test_every_integration_test_file_is_one_that_meson_runs():
    # tests/run.sh (and CI) runs the integration tests through meson, one test per file in meson.build's list: a
    # file left off it would pass here and never run there.
    here = Path(__file__).resolve().parent
    files = {path.stem[len("test_"):] for path in here.glob("test_*.py")}
    listed = set(re.findall(r"^  '([a-z_]+)',$", (here / "meson.build").read_text(), re.M))
    assert files - listed == set(), f"not in tests/integration/meson.build: {sorted(files - listed)}"
    assert listed - files == set(), f"listed without a file: {sorted(listed - files)}"


#!/usr/bin/env python3
"""Writes canopy's bash completion from the template and the options that `canopy --help` lists.

usage: make_completion.py CANOPY TEMPLATE OUTPUT SYSCONFDIR
"""
import re
import subprocess
import sys

# An option line of --help: two spaces, the spellings and the value they take, then the description two or more
# spaces on (or on the next line when the spellings are long).
OPTION_LINE = re.compile(r"^  (-\S.*?)(?: {2,}|$)")


def help_options(help_text):
    """[(spellings, value)] for each option line of --help; value is '' for a flag, '[=...]' for an inline one."""
    options = []
    for line in help_text.splitlines():
        match = OPTION_LINE.match(line)
        if not match:
            continue
        pieces = match.group(1).split(", ")
        last, _, value = pieces[-1].partition(" ")
        if "[" in last:   # --timing[=FILE.json]
            last, value = last[:last.index("[")], last[last.index("["):]
        options.append((pieces[:-1] + [last], value))
    return options


def case_lines(options):
    quote = lambda text: "'" + text.replace("'", "'\\''") + "'"
    return "\n".join(f"        {' | '.join(spellings)}) _canopy_opt=({spellings[0]} {quote(value)}) ;;"
                     for spellings, value in options)


def main(canopy, template, output, sysconfdir):
    help_text = subprocess.run([canopy, "--help"], capture_output=True, text=True, check=True).stdout
    options = help_options(help_text)
    if not options:
        sys.exit(f"make_completion: no options found in {canopy} --help")
    text = open(template).read()
    text = text.replace("@OPTION_CASES@", case_lines(options))
    text = text.replace("@OPTIONS@", " ".join(s for spellings, _ in options for s in spellings))
    text = text.replace("@SYSCONFDIR@", sysconfdir)
    with open(output, "w") as out:
        out.write(text)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip())
    main(*sys.argv[1:])

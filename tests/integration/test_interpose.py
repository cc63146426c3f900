# The interposer end to end: record a command, build the index and node cache, then rerun it from the cache alone.
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD_DIR

INTERPOSER = BUILD_DIR / "lib" / "interpose" / "libcanopy_interpose.so"
STAGE_TOOL = BUILD_DIR / "lib" / "stage" / "canopy-stage-tool"
PYTHON = "/usr/bin/python3"
STEP_TIMEOUT = 30


def run(args, env=None, cwd=None, check=True):
    """Runs one step; a step that hangs fails the test instead of stalling it."""
    completed = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True,
                               timeout=STEP_TIMEOUT)
    if check and completed.returncode != 0:
        pytest.fail(f"{args} exited {completed.returncode}\nstdout:\n{completed.stdout}\nstderr:\n{completed.stderr}")
    return completed


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CANOPY_STAGE_", "LD_", "PYTHON"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def interposed(prefix=None, record=None, cache=None, stats=None):
    extra = {"LD_PRELOAD": INTERPOSER, "LD_AUDIT": INTERPOSER}
    if record:
        extra.update(CANOPY_STAGE_RECORD=record, CANOPY_STAGE_PREFIXES=prefix)
    if cache:
        extra["CANOPY_STAGE_CACHE"] = cache
    if stats:
        extra["CANOPY_STAGE_STATS"] = stats
    return clean_env(**extra)


def run_traced(tmp_path, args, env, src):
    """Runs one step under strace; returns its result and the file system calls that named a path under src."""
    trace = tmp_path / "trace.txt"
    result = run(["strace", "-f", "-qq", "-o", trace, "-e", "trace=%file", *args], env=env)
    return result, [line for line in trace.read_text().splitlines() if f'"{src}' in line]


def read_stats(path, kind):
    """Sums the counters of every process of one kind ("preload" or "audit") from a stats file."""
    totals = {}
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        if fields[0] != kind:
            continue
        for field in fields[1:]:
            name, _, value = field.partition("=")
            if value.isdigit():
                totals[name] = totals.get(name, 0) + int(value)
    return totals


def stage(tmp_path, prefix, record):
    """Builds the index from a record file and installs a node cache; returns the cache directory."""
    index = tmp_path / "manifest.idx"
    cache = tmp_path / "cache"
    run([STAGE_TOOL, "build", "--prefix", prefix, "--records", record, "-o", index])
    run([STAGE_TOOL, "install", "--cache", cache, index])
    return cache, index


@pytest.fixture
def python_tree(tmp_path):
    """A site directory with a package, a .pth file adding a second directory, and a symlinked package."""
    src = tmp_path / "src"
    site = src / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("from . import mod\nVALUE = mod.VALUE * 2\n")
    (site / "pkg" / "mod.py").write_text("VALUE = 21\n")
    (src / "real_linked").mkdir()
    (src / "real_linked" / "__init__.py").write_text("NAME = 'linked'\n")
    (site / "linked").symlink_to("../real_linked")
    (src / "extra").mkdir()
    (src / "extra" / "extramod.py").write_text("GREETING = 'from the .pth path'\n")
    (site / "extra.pth").write_text(str(src / "extra") + "\n")
    program = (
        "import site, sys\n"
        f"site.addsitedir({str(site)!r})\n"
        "import pkg, linked, extramod\n"
        "try:\n"
        "    import not_there\n"
        "except ImportError as e:\n"
        "    print('missing:', e.name)\n"
        "import os\n"
        f"print(pkg.VALUE, linked.NAME, extramod.GREETING, pkg.__file__, linked.__file__)\n"
        f"print(sorted(os.listdir({str(site / 'pkg')!r})))\n"
        f"print(os.path.getsize({str(site / 'pkg' / 'mod.py')!r}), os.path.islink({str(site / 'linked')!r}))\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.realpath.restype = ctypes.c_char_p\n"
        f"print(libc.realpath({str(site / 'linked' / '__init__.py')!r}.encode(), None).decode())\n"
    )
    return src, program


def test_python_import_runs_from_the_cache_alone(tmp_path, python_tree):
    src, program = python_tree
    plain = run([PYTHON, "-c", program], env=clean_env())
    record = tmp_path / "record.txt"
    recorded = run([PYTHON, "-c", program], env=interposed(prefix=src, record=record))
    assert recorded.stdout == plain.stdout
    assert "missing: not_there" in plain.stdout
    cache, _ = stage(tmp_path, src, record)

    # The source tree is gone: only the node cache can answer.
    src.rename(tmp_path / "src.away")
    stats = tmp_path / "stats.txt"
    served = run([PYTHON, "-v", "-c", program], env=interposed(cache=cache, stats=stats))
    assert served.stdout == plain.stdout
    # The .pyc written while recording was accepted: its source's mtime and size match what stat reports.
    assert re.search(r"code object from '.*/pkg/__pycache__/mod\.cpython-\d+\.pyc'", served.stderr), served.stderr
    assert "bytecode is stale" not in served.stderr
    counters = read_stats(stats, "preload")
    assert counters["served_open"] >= 5, counters
    assert counters["served_errno"] >= 1, counters   # not_there and friends answered ENOENT locally
    assert counters["passed"] == 0, counters         # nothing under the prefix reached the filesystem


def test_unrecorded_names_are_answered_from_directory_listings(tmp_path, python_tree):
    src, program = python_tree
    record = tmp_path / "record.txt"
    run([PYTHON, "-c", program], env=interposed(prefix=src, record=record))
    cache, _ = stage(tmp_path, src, record)
    probe = f"import os; print(os.path.exists({str(src / 'site' / 'pkg' / 'never_looked_up.py')!r}))"
    stats = tmp_path / "stats.txt"
    served = run([PYTHON, "-c", probe], env=interposed(cache=cache, stats=stats))
    assert served.stdout.strip() == "False"
    assert read_stats(stats, "preload")["served_errno"] == 1


def test_a_write_inside_a_prefix_lands_on_the_real_filesystem(tmp_path, python_tree):
    src, program = python_tree
    record = tmp_path / "record.txt"
    run([PYTHON, "-c", program], env=interposed(prefix=src, record=record))
    cache, _ = stage(tmp_path, src, record)
    out = src / "site" / "pkg" / "written.txt"
    writer = (
        "import os\n"
        f"p = {str(out)!r}\n"
        "open(p, 'w').write('hello')\n"
        "print(open(p).read(), os.path.exists(p), 'written.txt' in os.listdir(os.path.dirname(p)))\n"
    )
    served = run([PYTHON, "-c", writer], env=interposed(cache=cache))
    assert served.stdout.strip() == "hello True True"
    assert out.read_text() == "hello"
    assert not (cache / "root" / str(out).lstrip("/")).exists()


def test_a_stale_manifest_is_detected(tmp_path, python_tree):
    src, program = python_tree
    record = tmp_path / "record.txt"
    run([PYTHON, "-c", program], env=interposed(prefix=src, record=record))
    _, index = stage(tmp_path, src, record)
    assert run([STAGE_TOOL, "validate", index], check=False).returncode == 0
    (src / "site" / "pkg" / "mod.py").write_text("VALUE = 2222\n")
    stale = run([STAGE_TOOL, "validate", index], check=False)
    assert stale.returncode == 1
    assert f"changed {src / 'site' / 'pkg' / 'mod.py'}: size 11 -> 13" in stale.stdout


def library_dirs(tmp_path):
    """The prefix with its lib directory (soft/lib), and a build directory outside it, for gcc-built libraries."""
    if not shutil.which("gcc"):
        pytest.fail("gcc is needed to build the test libraries")
    src = tmp_path / "soft"
    (src / "lib").mkdir(parents=True)
    build = tmp_path / "build"
    build.mkdir()
    return src, build


@pytest.fixture
def origin_tree(tmp_path):
    """liba.so finds libb.so through RUNPATH $ORIGIN/../lib; the program opens it through a symlinked dir."""
    src, build = library_dirs(tmp_path)
    (src / "lib2").mkdir()
    (src / "liblink").symlink_to("lib2")
    (build / "b.c").write_text("int b(void) { return 42; }\n")
    (build / "a.c").write_text("int b(void);\nint a(void) { return b() + 1; }\n")
    (build / "main.c").write_text(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n"
        "int main(int argc, char** argv) {\n"
        "  void* h = dlopen(argv[1], RTLD_NOW);\n"
        "  if (!h) { printf(\"dlopen failed: %s\\n\", dlerror()); return 1; }\n"
        "  int (*a)(void) = (int (*)(void))dlsym(h, \"a\");\n"
        "  Dl_info info; dladdr((void*)a, &info);\n"
        "  printf(\"a() = %d\\n\", a());\n"
        "  fprintf(stderr, \"dladdr %s\\n\", info.dli_fname);\n"
        "  return 0;\n}\n")
    run(["gcc", "-shared", "-fPIC", "-o", src / "lib" / "libb.so", build / "b.c"])
    run(["gcc", "-shared", "-fPIC", "-o", src / "lib2" / "liba.so", build / "a.c", "-L", src / "lib", "-lb",
         "-Wl,-rpath,$ORIGIN/../lib"])
    run(["gcc", "-o", build / "main", build / "main.c", "-ldl"])
    return src, build / "main"


def test_origin_libraries_load_from_the_cache_without_touching_the_source(tmp_path, origin_tree):
    src, main = origin_tree
    target = src / "liblink" / "liba.so"
    plain = run([main, target], env=clean_env())
    assert plain.stdout == "a() = 43\n"
    record = tmp_path / "record.txt"
    run([main, target], env=interposed(prefix=src, record=record))
    cache, _ = stage(tmp_path, src, record)

    stats = tmp_path / "stats.txt"
    if shutil.which("strace"):
        served, touching = run_traced(tmp_path, [main, target], interposed(cache=cache, stats=stats), src)
        assert touching == [], "\n".join(touching)
    else:
        src.rename(tmp_path / "soft.away")
        served = run([main, target], env=interposed(cache=cache, stats=stats))
    assert served.stdout == plain.stdout
    # The loader's name for the library is the copy's: that is what dladdr and /proc/self/maps show.
    assert f"dladdr {cache}/root{src.resolve()}/lib2/liba.so" in served.stderr
    loader = read_stats(stats, "audit")
    assert loader["loader_redirect"] == 2, loader   # liba.so, then libb.so via $ORIGIN inside the mirror
    assert loader["loader_fail"] >= 1, loader       # the hwcaps and tls probes fail locally


@pytest.fixture
def library_path_tree(tmp_path):
    """A program whose libb.so (DT_NEEDED, found by name) is in an LD_LIBRARY_PATH directory under the prefix."""
    src, build = library_dirs(tmp_path)
    (build / "b.c").write_text("int b(void) { return 42; }\n")
    (build / "main.c").write_text('#include <stdio.h>\nint b(void);\nint main(void) { printf("b() = %d\\n", b()); }\n')
    run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libb.so", "-o", src / "lib" / "libb.so", build / "b.c"])
    run(["gcc", "-o", build / "main", build / "main.c", "-L", src / "lib", "-lb"])
    # Self-contained, like a Python environment that brings its own C library: every name the program needs is
    # in the directory, so the loader would never search past it.
    libc = run(["gcc", "-print-file-name=libc.so.6"]).stdout.strip()
    shutil.copy(os.path.realpath(libc), src / "lib" / "libc.so.6")
    return src, build


def with_library_path(env, *dirs):
    return dict(env, LD_LIBRARY_PATH=":".join(str(d) for d in dirs))


def test_a_library_found_along_ld_library_path_loads_from_the_cache_without_the_loaders_search(
        tmp_path, library_path_tree):
    """The loader stats each hwcaps subdirectory of an LD_LIBRARY_PATH directory itself (la_objsearch never sees
    those stats): a bare name the cache can answer for is answered before that search, so no rank touches the
    shared filesystem for it."""
    src, build = library_path_tree
    main = build / "main"
    plain = run([main], env=with_library_path(clean_env(), src / "lib"))
    assert plain.stdout == "b() = 42\n"
    record = tmp_path / "record.txt"
    run([main], env=with_library_path(interposed(prefix=src, record=record), src / "lib"))
    cache, _ = stage(tmp_path, src, record)

    served, touching = run_traced(tmp_path, [main], with_library_path(interposed(cache=cache), src / "lib"), src)
    assert served.stdout == plain.stdout
    assert touching == [], "\n".join(touching)
    stats = tmp_path / "stats.txt"
    run([main], env=with_library_path(interposed(cache=cache, stats=stats), src / "lib"))
    assert read_stats(stats, "audit")["loader_named"] == 2   # libb.so and libc.so.6


def test_the_loader_still_picks_its_rpath_an_earlier_directory_or_a_hwcaps_copy(tmp_path, library_path_tree):
    """Where the cache cannot be sure which file the loader takes, the loader searches as always: the served
    program runs the same library as the plain one."""
    src, build = library_path_tree
    outside = tmp_path / "outside"
    outside.mkdir()
    (build / "b9.c").write_text("int b(void) { return 9; }\n")
    run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libb.so", "-o", outside / "libb.so", build / "b9.c"])
    # A DT_RPATH is searched before LD_LIBRARY_PATH.
    rpath_main = build / "main-rpath"
    run(["gcc", "-o", rpath_main, build / "main.c", "-L", outside, "-lb", f"-Wl,--disable-new-dtags,-rpath,{outside}"])

    def served_like_plain(main, dirs, expected):
        plain = run([main], env=with_library_path(clean_env(), *dirs))
        assert plain.stdout == f"b() = {expected}\n"
        record = tmp_path / "record.txt"
        record.unlink(missing_ok=True)
        # Recorded with the program without RPATH too, so that the cache knows the library in the prefix.
        for program in {main, build / "main"}:
            run([program], env=with_library_path(interposed(prefix=src, record=record), *dirs))
        cache, _ = stage(tmp_path, src, record)
        stats = tmp_path / "stats.txt"
        stats.unlink(missing_ok=True)
        served = run([main], env=with_library_path(interposed(cache=cache, stats=stats), *dirs))
        assert served.stdout == plain.stdout, (main, dirs)
        shutil.rmtree(cache)
        return read_stats(stats, "audit")

    served_like_plain(rpath_main, [src / "lib"], 9)
    served_like_plain(build / "main", [outside, src / "lib"], 9)
    hwcaps = src / "lib" / "glibc-hwcaps" / "x86-64-v2"
    hwcaps.mkdir(parents=True)
    (build / "b7.c").write_text("int b(void) { return 7; }\n")
    run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libb.so", "-o", hwcaps / "libb.so", build / "b7.c"])
    assert served_like_plain(build / "main", [src / "lib"], 7).get("loader_named", 0) == 0


def test_without_a_cache_the_interposer_changes_nothing(tmp_path, python_tree):
    src, program = python_tree
    plain = run([PYTHON, "-c", program], env=clean_env())
    missing_cache = run([PYTHON, "-c", program], env=interposed(cache=tmp_path / "no-such-cache"))
    assert missing_cache.stdout == plain.stdout


def test_the_library_exports_the_listed_wrappers_and_the_loader_hooks_only():
    """lib/interpose/symbols.def is the one list of wrapped functions; nothing else may shadow the program's
    symbols, and a rank loads no C++ runtime with it."""
    symbols = Path(__file__).resolve().parents[2] / "lib" / "interpose" / "symbols.def"
    listed = set(re.findall(r"^SYMBOL\([^,]+, (\w+),", symbols.read_text(), re.MULTILINE))
    assert len(listed) == 41
    defined = run(["nm", "-D", "--defined-only", INTERPOSER]).stdout.split("\n")
    exported = {fields[-1] for fields in map(str.split, defined) if fields}
    assert exported == listed | {"la_version", "la_objopen", "la_objsearch"}
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", run(["readelf", "-d", INTERPOSER]).stdout)
    assert set(needed) <= {"libc.so.6", "libdl.so.2"}, needed

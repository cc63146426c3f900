# The Python package as pip installs it: offline into a fresh venv, imported by every rank of a canopy job.
import json
import os
import re
import subprocess

import pytest

from conftest import BUILD_DIR, REPO

LIBRARY = BUILD_DIR / "lib" / "api" / "libcanopy.so"
PACKAGE = REPO / "lib" / "python"
PYTHON = "/usr/bin/python3"
LAUNCHER_PREFIXES = ("CANOPY_", "PMIX_", "PMI_", "OMPI_", "SLURM_", "PALS_", "TORCHELASTIC_")

# What each rank checks: the package is the venv's, torch stays out until canopy.torch is asked for.
RANK_IMPORT = r"""
import importlib.metadata, json, sys
import canopy
found = {"file": canopy.__file__, "library": canopy._lib._name, "torch_after_import": "torch" in sys.modules,
         "version": importlib.metadata.version("canopy-hpc"), "mode": canopy.mode(),
         "place": [canopy.rank(), canopy.size(), canopy.local_rank(), canopy.local_size(), canopy.node_rank(),
                   canopy.num_nodes()],
         "count": canopy.store_add("ranks", 1)}
canopy.barrier()
found["total"] = int(canopy.store_get("ranks", timeout=30))
try:
    canopy.torch
    found["lazy_torch"] = "imported"
except ModuleNotFoundError as error:   # this venv has no torch: the attribute tried to import it only now
    found["lazy_torch"] = str(error)
print("venvcheck " + json.dumps(found), flush=True)
"""


def clean_env(base):
    env = {k: v for k, v in base.items() if not k.startswith(LAUNCHER_PREFIXES)}
    for name in ("PYTHONPATH", "RANK", "WORLD_SIZE", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv (no system packages) with the package installed by its own pip, offline."""
    root = tmp_path_factory.mktemp("venv") / "env"
    env = clean_env(os.environ)
    made = subprocess.run([PYTHON, "-m", "venv", str(root)], capture_output=True, text=True, timeout=90, env=env)
    assert made.returncode == 0, f"python3 -m venv failed (is python3-venv installed?):\n{made.stderr}"
    # The command the README gives.
    command = [str(root / "bin" / "pip"), "install", "--no-build-isolation", "--no-index", str(PACKAGE)]
    installed = subprocess.run(command, capture_output=True, text=True, timeout=90, env=env)
    assert installed.returncode == 0, f"{command}\n{installed.stdout}\n{installed.stderr}"
    assert "Successfully installed canopy-hpc-" in installed.stdout, installed.stdout
    return root


def test_a_4_rank_job_imports_canopy_from_the_venv_pip_made(run_canopy, sandbox, venv, tmp_path):
    script = tmp_path / "rank_import.py"
    script.write_text(RANK_IMPORT)
    # No CANOPY_LIBRARY here: canopyd tells its ranks where its own libcanopy is.
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", venv / "bin" / "python", script], timeout=90,
                        env=clean_env(sandbox.env))
    assert result.returncode == 0, result.describe()
    found = sorted((json.loads(line.split("venvcheck ", 1)[1]) for line in result.stdout.splitlines()
                    if "venvcheck " in line), key=lambda entry: entry["place"][0])
    assert [entry["place"] for entry in found] == [[r, 4, r % 2, 2, r // 2, 2] for r in range(4)], result.describe()
    assert sorted(entry["count"] for entry in found) == [1, 2, 3, 4], result.describe()
    for entry in found:
        assert entry["file"].startswith(str(venv / "lib")), entry
        assert entry["library"] == str(BUILD_DIR / "lib" / "api" / "libcanopy.so.0"), entry
        assert entry["mode"] == "canopy" and entry["total"] == 4, entry
        assert entry["version"] == meson_version(), entry
        assert entry["torch_after_import"] is False, entry
        assert entry["lazy_torch"] == "No module named 'torch'", entry


def test_the_venvs_package_finds_an_installed_libcanopy_through_the_loader(sandbox, venv):
    # No CANOPY_LIBRARY: the loader's search path stands in for an installed canopy (ld.so.cache, /usr/local/lib).
    env = {**clean_env(sandbox.env), "LD_LIBRARY_PATH": str(LIBRARY.parent)}
    probe = "import canopy; print(canopy._lib._name, canopy.mode(), canopy.size())"
    result = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=30,
                            env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["libcanopy.so.0", "singleton", "1"], result.stdout


def test_import_canopy_does_not_import_torch_until_canopy_torch_is_used(sandbox):
    probe = ("import sys, canopy; before = 'torch' in sys.modules; group = canopy.torch.init_process_group; "
             "print(before, 'torch' in sys.modules, canopy.torch.__name__)")
    env = {**clean_env(sandbox.env), "PYTHONPATH": str(PACKAGE), "CANOPY_LIBRARY": str(LIBRARY)}
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    if "No module named 'torch'" in result.stderr:
        pytest.skip("python3-torch is not installed")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "canopy.torch"], result.stdout


def test_the_build_tree_and_the_repository_root_hold_no_empty_canopy_package(sandbox):
    # With the build tree (or the repository) on sys.path, `import canopy` must fail plainly, not give an empty
    # namespace package whose first attribute fails far from the cause.
    path = os.pathsep.join(str(p) for p in (BUILD_DIR / "lib" / "python", BUILD_DIR, REPO, REPO / "lib"))
    env = {**clean_env(sandbox.env), "PYTHONPATH": path}
    result = subprocess.run([PYTHON, "-c", "import canopy; print(canopy)"], capture_output=True, text=True,
                            timeout=30, env=env, cwd=BUILD_DIR)
    assert result.returncode != 0, result.stdout
    assert "ModuleNotFoundError: No module named 'canopy'" in result.stderr, result.stderr


def meson_version():
    return re.search(r"version : '([^']+)'", (REPO / "meson.build").read_text()).group(1)


def test_the_packages_version_is_the_projects():
    pyproject = (PACKAGE / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == meson_version()
    assert re.search(r'^__version__ = "([^"]+)"', (PACKAGE / "canopy" / "__init__.py").read_text(),
                     re.M).group(1) == meson_version()
    assert re.search(r'^name = "([^"]+)"', pyproject, re.M).group(1) == "canopy-hpc"

"""The build backend (PEP 517) that turns this folder into a wheel of the pure-Python package `canopy`.

In-tree, with no requirements, so `pip install --no-build-isolation --no-index lib/python` works offline in any
venv or conda env: a fresh venv has no `wheel` package (setuptools cannot build a wheel without it), and
Python 3.12's venvs have no setuptools at all. The package's metadata is pyproject.toml's [project] table.
"""

import base64
import hashlib
import os
import re
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "canopy"


def _project():
    """The string fields of pyproject.toml's [project] table (all this package's metadata uses)."""
    fields, inside = {}, False
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as toml:
        for line in toml:
            line = line.split("#", 1)[0].strip()
            if line.startswith("["):
                inside = line == "[project]"
            elif inside and (match := re.fullmatch(r'([\w-]+)\s*=\s*"([^"]*)"', line)):
                fields[match.group(1)] = match.group(2)
    return fields


def _names():
    project = _project()
    distribution = re.sub(r"[-_.]+", "_", project["name"])
    return project, distribution, f"{distribution}-{project['version']}"


def _metadata(project):
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    for key, header in (("description", "Summary"), ("requires-python", "Requires-Python"),
                        ("license", "License")):
        if key in project:
            lines.append(f"{header}: {project[key]}")
    return "\n".join(lines) + "\n"


def _write_wheel(directory, files):
    """files: {path in the wheel: bytes}; adds WHEEL and RECORD and returns the wheel's file name."""
    project, distribution, stem = _names()
    info = f"{stem}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = _metadata(project).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: canopy_wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    return name


def _package_files():
    """The package's modules; meson's template (_build_config.py.in) is not one: a package pip installs finds
    libcanopy through CANOPY_LIBRARY or the dynamic loader."""
    files = {}
    for name in sorted(os.listdir(os.path.join(HERE, PACKAGE))):
        if name.endswith(".py"):
            with open(os.path.join(HERE, PACKAGE, name), "rb") as source:
                files[f"{PACKAGE}/{name}"] = source.read()
    return files


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # `pip install -e`: a .pth file that puts this folder on sys.path.
    return _write_wheel(wheel_directory, {f"{PACKAGE}_editable.pth": (HERE + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    import tarfile
    _, _, stem = _names()
    name = f"{stem}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as sdist:
        for path in ["pyproject.toml", "canopy_wheel.py"] + list(_package_files()):
            sdist.add(os.path.join(HERE, path), arcname=f"{stem}/{path}")
        pkg_info = os.path.join(sdist_directory, "PKG-INFO")
        with open(pkg_info, "w", encoding="utf-8") as info:
            info.write(_metadata(_project()))
        sdist.add(pkg_info, arcname=f"{stem}/PKG-INFO")
        os.unlink(pkg_info)
    return name

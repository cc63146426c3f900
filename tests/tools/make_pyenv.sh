#!/usr/bin/env bash
# Builds DEST: a self-contained copy of Debian's Python 3.11 with python3-torch, its Python dependencies and every
# shared library they load, so that with DEST on slowfs all of an `import torch` is looked up under the mount.
#
# usage: tests/tools/make_pyenv.sh DEST
#   Needs: apt-get install -y python3-torch (about 830 MB with its dependencies, 220 packages, ~40 s from a mirror).
#   Run the environment as DEST/bin/python3 (a sh wrapper) or, where DEST is mounted elsewhere, MOUNT/bin/python3:
#   it puts MOUNT/lib/x86_64-linux-gnu first on LD_LIBRARY_PATH and execs MOUNT/bin/python3.11, which finds its
#   own prefix (MOUNT) from its path, so sys.path is MOUNT/lib/python3.11 and MOUNT/lib/python3/dist-packages.
#   Only the dynamic loader itself (/lib64/ld-linux-x86-64.so.2, named in every binary) and /bin/sh stay
#   outside, as they would on a cluster node whose frameworks live on a shared filesystem.
# Layout:
#   DEST/bin/python3, python3.11                 wrapper, interpreter
#   DEST/lib/python3.11/                         the standard library (with lib-dynload and __pycache__)
#   DEST/lib/python3/dist-packages/              torch and every python3-* package it depends on
#   DEST/lib/x86_64-linux-gnu/                   the shared libraries (ldd closure + what import torch maps)
# Idempotent: a stamp records the package versions and this script's hash; if they match, it returns at once.
set -euo pipefail

if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: $0 DEST   (builds a self-contained python3 + torch environment in DEST)" >&2
  exit 2
fi
dest=$(realpath -m -- "$1")
python=/usr/bin/python3.11
stamp_name=.make_pyenv-stamp

if [[ ! -x $python ]] || ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q 'install ok installed'; then
  echo "make_pyenv: needs Debian's python3-torch and $python; install them with: apt-get install -y python3-torch" >&2
  exit 1
fi

stamp="$(dpkg-query -W -f='${Package} ${Version}\n' python3-torch python3.11 libtorch1.13 python3-numpy 2>/dev/null)
script $(sha256sum "$0" | cut -d' ' -f1)"
if [[ -f $dest/$stamp_name && "$(cat "$dest/$stamp_name")" == "$stamp" ]]; then
  echo "make_pyenv: $dest is up to date"
  exit 0
fi
if mountpoint -q "$dest"; then
  echo "make_pyenv: $dest is a mount point (slowfs?); unmount it first (fusermount3 -u $dest), then run again" >&2
  exit 1
fi

started=$(date +%s)
work="$dest.partial-$$"
rm -rf -- "$work"
trap 'rm -rf -- "$work"' EXIT
mkdir -p "$work/bin" "$work/lib/python3/dist-packages" "$work/lib/x86_64-linux-gnu"

# The interpreter and its wrapper. The wrapper finds the environment from its own path, so it also works
# through a mount of DEST at another place.
cp -a "$python" "$work/bin/python3.11"
cat > "$work/bin/python3" <<'EOF'
#!/bin/sh
# python3 of this environment: its own shared libraries first, its own prefix (found from the interpreter's path).
bin=${0%/*}
case $bin in
  */bin) root=${bin%/bin} ;;
  *) root=$bin/.. ;;
esac
LD_LIBRARY_PATH="$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$root/bin/python3.11" "$@"
EOF
chmod 755 "$work/bin/python3"

# The standard library, with the .pyc files Debian compiled at install time (cp -a keeps the mtimes they check).
cp -a /usr/lib/python3.11 "$work/lib/"

# dist-packages: the top-level entries owned by python3-torch and the packages it depends on, recursively.
mapfile -t packages < <("$python" - <<'EOF'
import subprocess
def depends(package):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Depends},${Pre-Depends}", package],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None  # virtual or not installed
    names = []
    for part in out.stdout.split(","):
        for alternative in part.split("|"):
            name = alternative.strip().split(" ")[0].split(":")[0]
            if name:
                names.append(name)
    return names
seen, todo = set(), ["python3-torch"]
while todo:
    package = todo.pop()
    if package in seen:
        continue
    names = depends(package)
    if names is not None:
        seen.add(package)
        todo.extend(names)
print("\n".join(sorted(seen)))
EOF
)
site=/usr/lib/python3/dist-packages
mapfile -t entries < <(dpkg -L "${packages[@]}" 2>/dev/null | grep -E "^$site/[^/]+$" | sort -u)
for entry in "${entries[@]}"; do
  [[ -e $entry || -L $entry ]] || continue
  cp -a "$entry" "$work/lib/python3/dist-packages/"
  if [[ $entry == *.py ]]; then   # a single-module package: its .pyc lives in the shared __pycache__
    module=$(basename "$entry" .py)
    for pyc in "$site/__pycache__/$module".cpython-311*.pyc; do
      [[ -e $pyc ]] || continue
      mkdir -p "$work/lib/python3/dist-packages/__pycache__"
      cp -a "$pyc" "$work/lib/python3/dist-packages/__pycache__/"
    done
  fi
done

# Shared libraries, under the names the loader looks for: the ldd closure of every ELF object in the environment,
# what a real `import torch` maps (torch dlopens libraries that are in no DT_NEEDED list), and the targets of the
# symlinks in dist-packages (torch/lib/*.so -> ../../../../x86_64-linux-gnu/...). Debian's symlink chains
# (libfoo.so.1 -> libfoo.so.1.2.3) are kept, so a lookup costs what it costs in /usr.
bring_libraries=$(cat <<'EOF_PY'
import os, shutil, sys
work = sys.argv[1]
out = os.path.join(work, "lib/x86_64-linux-gnu")
site = "/usr/lib/python3/dist-packages"
needed = [line.strip() for line in sys.stdin if line.strip()]
# Links in dist-packages that point at libraries: their targets, as seen from /usr.
for top, dirs, files in os.walk(os.path.join(work, "lib/python3/dist-packages")):
    for name in dirs + files:
        link = os.path.join(top, name)
        if os.path.islink(link) and not os.path.exists(link):
            original = site + link[len(os.path.join(work, "lib/python3/dist-packages")):]
            target = os.path.normpath(os.path.join(os.path.dirname(original), os.readlink(original)))
            if target.startswith("/usr/lib/x86_64-linux-gnu/") and os.path.exists(target):
                needed.append(target)
# Symlinks of each library directory by target, to bring along the soname links of files found only by path.
links_to = {}
for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib"):
    for entry in os.scandir(directory):
        if entry.is_symlink():
            target = os.readlink(entry.path)
            if "/" not in target:
                links_to.setdefault((directory, target), []).append(entry.name)
done = set()
def bring(directory, name):
    if name in done or name.startswith(("ld-linux", "linux-vdso")):
        return
    done.add(name)
    path = os.path.join(directory, name)
    dest = os.path.join(out, name)
    if os.path.islink(path) and "/" not in os.readlink(path):
        if not os.path.lexists(dest):
            os.symlink(os.readlink(path), dest)
        bring(directory, os.readlink(path))
    elif not os.path.lexists(dest):
        shutil.copy2(path, dest)  # follows a link that leaves the directory
    for alias in links_to.get((directory, name), []):
        bring(directory, alias)
for path in needed:
    bring(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
EOF_PY
)
{
  find "$work/bin/python3.11" "$work/lib/python3.11" "$work/lib/python3/dist-packages" -type f \
      \( -name '*.so' -o -name '*.so.*' -o -name 'python3.11' \) -print0 |
    { xargs -0 -r ldd 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
  "$python" -c '
import torch, numpy
torch.ones(3).sum()
for line in open("/proc/self/maps"):
    fields = line.split()
    if len(fields) >= 6 and ".so" in fields[5] and fields[5].startswith("/usr/lib/") and "/python3" not in fields[5]:
        print(fields[5])
'
} | sort -u | "$python" -c "$bring_libraries" "$work"

# Symlinks that still leave the environment (e.g. sitecustomize.py -> /etc/python3.11/...) become copies of
# their targets; relative links inside it stay links.
while IFS= read -r -d '' link; do
  target=$(realpath -m -- "$link")
  if [[ $target != "$work"/* ]]; then
    rm -f -- "$link"
    if [[ -e $target ]]; then cp -aL -- "$target" "$link"; fi
  fi
done < <(find "$work" -type l -print0)

# Smoke test: the copy imports torch, and from itself.
check=$("$work/bin/python3" -c '
import sys, torch, numpy
print(sys.prefix, torch.__file__, numpy.__file__, float(torch.ones(3).sum()))')
read -r prefix torch_file numpy_file total <<< "$check"
if [[ $prefix != "$work" || $torch_file != "$work"/* || $numpy_file != "$work"/* || $total != 3.0 ]]; then
  echo "make_pyenv: the copy in $work does not run from itself: $check" >&2
  exit 1
fi

echo "$stamp" > "$work/$stamp_name"
if [[ -e $dest ]]; then
  rm -rf -- "$dest"
fi
mkdir -p "$(dirname "$dest")"
mv -- "$work" "$dest"
trap - EXIT
echo "make_pyenv: built $dest ($(du -sh "$dest" | cut -f1), $(find "$dest" | wc -l) files, ${#packages[@]} packages" \
     "in the dependency closure, $(ls "$dest/lib/x86_64-linux-gnu" | wc -l) shared libraries) in" \
     "$(( $(date +%s) - started )) s"

#!/usr/bin/env python3
"""Description: the shared library exports exactly the symbols of its version
map (lib/libshmesh.map), each under the map's version, and those are exactly
the functions lib/include/shmesh.h declares SHMESH_API.  Without a header:
the first two checks alone (a device plugin and lib/device/plugin.map).

Usage: check_symbols.py NM LIBSHMESH.so libshmesh.map shmesh.h
       check_symbols.py NM PLUGIN.so plugin.map
Exit 0 pass, 1 fail, 77 skip (no nm)."""
import re
import shutil
import subprocess
import sys


def map_symbols(path):
    """{symbol: version} from a version script's global: lists."""
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    symbols = {}
    for node in re.finditer(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}\s*[\w.]*\s*;", text, re.S):
        version, body = node.group(1), node.group(2)
        glob = re.search(r"global:(.*?)(?:local:|$)", body, re.S)
        for name in re.findall(r"[^\s;]+", glob.group(1) if glob else ""):
            if any(c in name for c in "*?["):
                sys.exit(f"{path}: '{name}' is a pattern: list every symbol by name")
            symbols[name] = version
    return symbols


def header_functions(path):
    """Functions declared SHMESH_API, outside preprocessor lines."""
    lines, skip = [], False
    for line in open(path):
        if skip or line.lstrip().startswith("#"):
            skip = line.rstrip().endswith("\\")
            continue
        lines.append(line)
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", "".join(lines), flags=re.S)
    return set(re.findall(r"\bSHMESH_API\b[^;{}]*?\b(shmesh_\w+)\s*\(", text))


def exported(nm, lib):
    """{symbol: version} of the defined dynamic symbols (not the version nodes)."""
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] == "A":
            continue
        name, _, version = parts[2].partition("@")
        symbols[name] = version.lstrip("@")
    return symbols


def main():
    nm, lib, map_path = sys.argv[1:4]
    header = sys.argv[4] if len(sys.argv) > 4 else None
    if not shutil.which(nm):
        print(f"SKIP: {nm} not found")
        return 77
    listed = map_symbols(map_path)
    declared = header_functions(header) if header else set(listed)
    have = exported(nm, lib)
    errors = []
    for name in sorted(set(listed) - set(have)):
        errors.append(f"{name}: in the map, not exported by {lib}")
    for name in sorted(set(have) - set(listed)):
        errors.append(f"{name}: exported, not in the map")
    for name in sorted(set(have) & set(listed)):
        if have[name] != listed[name]:
            errors.append(f"{name}: exported as version '{have[name]}', the map says "
                          f"'{listed[name]}'")
    for name in sorted(declared - set(listed)):
        errors.append(f"{name}: declared SHMESH_API in {header}, not in the map")
    for name in sorted(set(listed) - declared):
        errors.append(f"{name}: in the map, not declared SHMESH_API in {header}")
    for e in errors:
        print(e)
    print(f"{len(have)} exported, {len(listed)} in the map"
          f"{f', {len(declared)} declared' if header else ''}: "
          f"{'mismatch' if errors else 'all agree'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks a built gpufeed wheel's name, tags, metadata and contents (stdlib only).

Usage: scripts/check-wheel.py WHEEL [--version X.Y.Z]
Exit 0 when every check passes, 1 with one line per failed check otherwise.
"""

import argparse
import re
import sys
import zipfile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("wheel")
    p.add_argument("--version", help="expected version (default: the workspace Cargo.toml's)")
    a = p.parse_args()
    version = a.version or cargo_version()
    problems = []

    def check(ok, what):
        print("%s %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            problems.append(what)

    name = a.wheel.rsplit("/", 1)[-1]
    m = re.fullmatch(r"gpufeed-([^-]+)-(py3)-(none)-([^-]+)\.whl", name)
    check(m is not None, "file name gpufeed-VERSION-py3-none-PLATFORM.whl: %s" % name)
    platforms = m.group(4).split(".") if m else []
    check(m is not None and m.group(1) == version, "file name version is %s" % version)
    check(any(re.fullmatch(r"manylinux_2_(\d+)_(x86_64|aarch64)", t) for t in platforms),
          "a manylinux_2_N platform tag: %s" % platforms)
    floor = [int(re.search(r"_2_(\d+)_", t).group(1)) for t in platforms if re.match(r"manylinux_2_\d+_", t)]
    check(bool(floor) and min(floor) <= 28, "glibc floor at most 2.28 (zig build): 2.%s" % (min(floor) if floor else "?"))

    z = zipfile.ZipFile(a.wheel)
    names = set(z.namelist())
    dist = "gpufeed-%s.dist-info" % version
    data = "gpufeed-%s.data" % version
    for want in ["gpufeed/__init__.py", "gpufeed/__main__.py", "gpufeed/lightning.py",
                 "gpufeed/transformers.py", "gpufeed/accelerate.py", "gpufeed_probe.py",
                 # the job's side, which gpufeed.profile() imports
                 "gpufeed/_hook/__init__.py", "gpufeed/_hook/imports.py",
                 "gpufeed/_hook/overrides.py", "gpufeed/_hook/pipeline.py",
                 "gpufeed/_hook/site.py", "gpufeed/_hook/sitecustomize.py",
                 "gpufeed/_hook/steps.py",
                 data + "/scripts/gpufeed", dist + "/METADATA", dist + "/WHEEL", dist + "/RECORD"]:
        check(want in names, "contains %s" % want)
    check(not any("/tests/" in n or n.startswith("tests/") for n in names), "no test files inside")

    meta = z.read(dist + "/METADATA").decode() if dist + "/METADATA" in names else ""
    fields = {}
    for line in meta.split("\n\n", 1)[0].splitlines():
        k, _, v = line.partition(": ")
        fields.setdefault(k, []).append(v)
    check(fields.get("Name") == ["gpufeed"], "METADATA Name: gpufeed")
    check(fields.get("Version") == [version], "METADATA Version: %s" % version)
    check(fields.get("Requires-Python", [""])[0].startswith(">=3."), "METADATA Requires-Python set")
    check(not fields.get("Requires-Dist") or all("extra ==" in r for r in fields["Requires-Dist"]),
          "no required dependencies (frameworks are extras only): %s" % fields.get("Requires-Dist"))
    check("Operating System :: POSIX :: Linux" in fields.get("Classifier", []), "Linux classifier")
    check(len(meta.split("\n\n", 1)) == 2 and "pip install gpufeed" in meta, "README as long description")

    wheel = z.read(dist + "/WHEEL").decode() if dist + "/WHEEL" in names else ""
    check("Root-Is-Purelib: false" in wheel, "WHEEL Root-Is-Purelib: false (it holds a binary)")
    tags = [l.split(": ", 1)[1] for l in wheel.splitlines() if l.startswith("Tag: ")]
    check(tags and all(t.startswith("py3-none-manylinux") for t in tags), "WHEEL tags: %s" % tags)

    if data + "/scripts/gpufeed" in names:
        info = z.getinfo(data + "/scripts/gpufeed")
        binary = z.read(info)
        check(binary[:4] == b"\x7fELF", "scripts/gpufeed is an ELF binary")
        sections = elf_sections(binary)
        check(bool(sections) and not any(n.startswith(".debug") or n == ".symtab" for n in sections),
              "the binary is stripped (no .debug* or .symtab section)")
        check((info.external_attr >> 16) & 0o111 != 0, "the binary is executable")
        print("     binary %.1f MB, wheel %.1f MB" % (len(binary) / 1e6, sum(i.compress_size for i in z.infolist()) / 1e6))

    if problems:
        print("%d wheel check(s) failed" % len(problems))
        return 1
    print("wheel checks passed")
    return 0


def elf_sections(data):
    """Section names of a little-endian ELF64 file (the binary is x86_64 or aarch64)."""
    import struct

    if data[:5] != b"\x7fELF\x02" or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off, strtab_size = headers[shstrndx][4], headers[shstrndx][5]
    strtab = data[strtab_off:strtab_off + strtab_size]
    return [strtab[h[0]:strtab.index(b"\0", h[0])].decode() for h in headers]


def cargo_version():
    import os

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    text = open(os.path.join(root, "Cargo.toml")).read()
    m = re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    return m.group(1)


if __name__ == "__main__":
    sys.exit(main())

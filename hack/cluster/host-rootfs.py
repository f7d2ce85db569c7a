#!/usr/bin/python3
"""Writes the root filesystem of the e2e PyTorch image as a tarball, from the
Debian packages this host already installed for the tests (python3 and
python3-torch, which `make test` needs anyway), instead of a second download
through debootstrap: a slow mirror can then not push a CI run past its limit.

The image holds every file of the Depends/Pre-Depends closure of the wanted
packages, as dpkg lists them, under their canonical /usr paths (bookworm's
/bin, /lib, /lib64 and /sbin are symlinks into /usr, written as such), plus
minimal /etc/passwd, /etc/group and /tmp. No dpkg database: the image is run,
never upgraded. Owners are numeric 0:0 so the tarball means the same anywhere.

Usage: host-rootfs.py OUT.tar PACKAGE...   (prints the closure's digest with --digest)
"""
import hashlib
import io
import os
import subprocess
import sys
import tarfile

MERGED = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}


def installed():
    """Package name -> (version, depends, pre-depends, provides) of installed packages."""
    fmt = "${Package}\t${Version}\t${db:Status-Abbrev}\t${Depends}\t${Pre-Depends}\t${Provides}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], check=True, capture_output=True, text=True).stdout
    pkgs, provided = {}, {}
    for line in out.splitlines():
        name, version, status, dep, pre, prov = line.split("\t")
        if not status.startswith("ii"):
            continue
        pkgs[name] = (version, dep, pre)
        for p in names(prov):
            provided.setdefault(p[0], name)
    return pkgs, provided


def names(field):
    """Each comma-separated item of a dependency field as its alternatives' bare names."""
    items = []
    for item in field.split(","):
        alts = [a.strip().split(" ")[0].split(":")[0] for a in item.split("|") if a.strip()]
        if alts:
            items.append(alts)
    return items


def closure(wanted):
    pkgs, provided = installed()
    todo, seen = list(wanted), set()
    while todo:
        name = todo.pop()
        if name not in pkgs:
            name = provided.get(name, name)
        if name in seen:
            continue
        if name not in pkgs:
            sys.exit(f"host-rootfs: {name} is not installed on this host (apt-get install it first)")
        seen.add(name)
        _, dep, pre = pkgs[name]
        for alts in names(dep) + names(pre):
            pick = next((a for a in alts if a in pkgs or a in provided), None)
            if pick is None:
                sys.exit(f"host-rootfs: {name} needs one of {alts}, none installed")
            todo.append(pick)
    return {n: pkgs[n][0] for n in sorted(seen)}


def alternative_groups():
    """Each update-alternatives group as (its (name, link) pairs, the master's
    first and each slave's after it, and the master's candidate paths), from
    dpkg's records: dpkg does not list these links as any package's files."""
    adir, groups = "/var/lib/dpkg/alternatives", []
    for name in sorted(os.listdir(adir)):
        with open(os.path.join(adir, name)) as f:
            lines = f.read().split("\n")
        pairs, i = [(name, lines[1])], 2
        while i + 1 < len(lines) and lines[i]:
            pairs.append((lines[i], lines[i + 1]))
            i += 2
        slaves, i, candidates = len(pairs) - 1, i + 1, []  # past the blank line
        while i < len(lines) and lines[i]:
            candidates.append(lines[i])
            i += 2 + slaves  # path, priority, one line per slave
        groups.append((pairs, candidates))
    return groups


def chosen(alt):
    """Where the host's choice for alternative alt points, or None."""
    link = "/etc/alternatives/" + alt
    return os.path.realpath(link) if os.path.islink(link) else None


def owners(paths):
    """Path -> the installed package that ships it (dpkg -S), for those one does."""
    out = subprocess.run(["dpkg-query", "-S"] + list(paths), capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        pkg, _, path = line.partition(": ")
        if "," not in pkg and not pkg.startswith("diversion"):
            found[path.strip()] = pkg.split(":")[0]
    return found


def image_packages(wanted):
    """The closure of wanted, plus the package of each update-alternatives
    choice the host made for a group the closure has a candidate of: a
    dependency "libblas3 | libblas.so.3" is met by the first installed
    alternative, while the host's libblas.so.3 link may point at another
    (OpenBLAS), and the image must hold what its link points at."""
    pkgs = closure(wanted)
    groups = [(chosen(pairs[0][0]), candidates) for pairs, candidates in alternative_groups()]
    groups = [(c, candidates) for c, candidates in groups if c is not None]
    paths = {p for c, candidates in groups for p in [c] + candidates}
    who = owners(sorted(paths)) if paths else {}
    extra = sorted({who[c] for c, candidates in groups
                    if c in who and who[c] not in pkgs and any(who.get(x) in pkgs for x in candidates)})
    return closure(list(wanted) + extra) if extra else pkgs


def canonical(path):
    """The path inside the image, relative, with a merged-/usr parent resolved."""
    rel = path.lstrip("/")
    top, _, rest = rel.partition("/")
    if top in MERGED and rest:
        return MERGED[top] + "/" + rest
    return rel


def files(pkgs):
    paths = set()
    for name in pkgs:
        out = subprocess.run(["dpkg-query", "-L", name], check=True, capture_output=True, text=True).stdout
        for p in out.splitlines():
            if not p.startswith("/") or p.strip("/") in MERGED or not os.path.lexists(p):
                continue  # dpkg lists paths the host excluded (docs) too
            if os.path.islink(p) or not os.path.isdir(p):
                paths.add(p)
    return sorted(paths | alternatives(paths))


def alternatives(paths):
    """The update-alternatives links (libblas.so.3 for torch, say) whose chosen
    target is in the image."""
    links = set()
    have = {canonical(p) for p in paths}
    for pairs, _ in alternative_groups():
        for alt, link in pairs:
            target = chosen(alt)
            if target is not None and canonical(target) in have and os.path.islink(link):
                links.update(("/etc/alternatives/" + alt, link))
    return links


def add_dirs(tar, rel, done):
    parts = rel.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d in done:
            continue
        done.add(d)
        info = tarfile.TarInfo(d)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)


def add_text(tar, rel, text, mode=0o644):
    data = text.encode()
    info = tarfile.TarInfo(rel)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def write(out, paths):
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        done = set()
        for link, target in MERGED.items():
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
            add_dirs(tar, target + "/x", done)
            done.add(target)
        for p in paths:
            rel = canonical(p)
            add_dirs(tar, rel, done)
            info = tar.gettarinfo(p, arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            elif info.issym():
                tar.addfile(info)
        add_dirs(tar, "etc/x", done)
        add_text(tar, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
        add_text(tar, "etc/group", "root:x:0:\nnogroup:x:65534:\n")
        for d, mode in (("tmp", 0o1777), ("root", 0o700), ("checkpoint", 0o755)):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
    os.replace(tmp, out)


def main(argv):
    if len(argv) >= 2 and argv[0] == "--digest":
        pkgs = image_packages(argv[1:])
        print(hashlib.sha256(repr(sorted(pkgs.items())).encode()).hexdigest()[:16], len(pkgs))
        return
    if len(argv) < 2:
        sys.exit(__doc__)
    out, wanted = argv[0], argv[1:]
    pkgs = image_packages(wanted)
    paths = files(pkgs)
    write(out, paths)
    size = os.path.getsize(out) / 1048576
    print(f"rootfs from {len(pkgs)} host packages ({', '.join(wanted)} and their dependencies): {len(paths)} files, {size:.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])

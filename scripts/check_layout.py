#!/usr/bin/env python3
"""Checks the two layout rules a newcomer's tools depend on; `make test` runs it.

1. No circles between source files of a crate: when a.rs uses b.rs, b.rs does not use
   a.rs (directly or through other files). A file "uses" another when its code names a
   path in it (`crate::x::y`, `super::y`, `use crate::{x, ...}`); comments, unit-test
   modules and a module's own children (which it declares and re-exports) do not count.
   Circles make the order in which to read a crate undefined.
2. No tracked folder whose name common tooling reads as something else: `spec`, `dist`,
   `build`, `out`, `target` (test folders and build output, which whole-tree tools and
   default ignore files skip). Generated output (the demo's `out/`) is not tracked.

    python3 scripts/check_layout.py [ROOT]   # exit 1 naming each circle / folder
"""
import os
import re
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
# vendor/: upstream crates, patched (vendor/README.md); their layout is upstream's.
SKIP = {"target", ".git", "node_modules", "fuzz-corpus", "vendor"}
MISLEADING = {"spec", "dist", "build", "out", "target"}


def crates(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP and not d.startswith(".")]
        if "Cargo.toml" in filenames and os.path.isdir(os.path.join(dirpath, "src")):
            yield dirpath


def modules(src):
    """{module path tuple: file} for the files under src/ (lib.rs/main.rs is ())."""
    out = {}
    for dirpath, _, filenames in os.walk(src):
        for f in filenames:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            out[tuple(rel)] = os.path.join(dirpath, f)
    return out


def code_of(path):
    text = open(path, encoding="utf-8").read()
    # a file's unit tests may use anything; they are not part of the reading order
    text = re.split(r"#\[cfg\(test\)\]\s*mod \w+ \{", text)[0]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def expand_braces(text):
    """`crate::{a::B, c}` -> `crate::a::B crate::c` (one level of nesting is enough)."""
    def repl(m):
        prefix, inner = m.group(1), m.group(2)
        return " ".join(f"{prefix}::{part.strip()}" for part in inner.split(",") if part.strip())
    for _ in range(3):
        text = re.sub(r"((?:crate|super|self)(?:::\w+)*)::\{([^{}]*)\}", repl, text)
    return text


def root_reexports(mods):
    """{name: module} for the crate root's `pub use module::{Name, ...}`: `crate::Name` is
    a use of `module` (a re-export must not hide a circle)."""
    out = {}
    root = mods.get(())
    if root is None:
        return out
    text = expand_braces(code_of(root).replace("pub use ", "pub use crate::"))
    for m in re.finditer(r"pub use crate::((?:\w+::)+)(\w+)", text):
        path = tuple(m.group(1).rstrip(":").split("::"))
        for n in range(len(path), 0, -1):
            if path[:n] in mods:
                out[m.group(2)] = path[:n]
                break
    return out


def references(path, own, mods, reexports):
    """Modules of this crate that the file at module path `own` names."""
    text = expand_braces(code_of(path))
    found = set()
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
        parts = m.group(2).split("::")[1:]
        if m.group(1) == "crate":
            base = []
        else:
            # super:: in a file `a/b.rs` (module a::b) is `a`; in `a/mod.rs` (module a) it
            # is the crate root
            base = list(own[:-1])
            while parts and parts[0] == "super":
                base, parts = base[:-1], parts[1:]
        path_parts = base + parts
        if not base and path_parts and path_parts[0] in reexports and (path_parts[0],) not in mods:
            path_parts = list(reexports[path_parts[0]]) + path_parts[1:]
        # the longest prefix that is a file
        for n in range(len(path_parts), -1, -1):
            target = tuple(path_parts[:n])
            if target in mods:
                # a module declaring and re-exporting its own children is structure
                is_child = target[:len(own)] == own
                if target != own and target != () and not is_child:
                    found.add(target)
                break
    return found


def circles(crate):
    mods = modules(os.path.join(crate, "src"))
    reexports = root_reexports(mods)
    graph = {m: references(f, m, mods, reexports) for m, f in mods.items()}
    out = []
    for a, targets in graph.items():
        for b in targets:
            # b reaches a? (a path b -> ... -> a closes a circle through a -> b)
            seen, stack = {b}, [b]
            while stack:
                x = stack.pop()
                for y in graph.get(x, ()):
                    if y == a:
                        out.append((a, b))
                        stack = []
                        break
                    if y not in seen:
                        seen.add(y)
                        stack.append(y)
    # report each two-file pair once, longer circles by their edge
    named = set()
    for a, b in out:
        named.add(tuple(sorted([mods[a], mods[b]])))
    return sorted(named)


def tracked_folders(root):
    """Folders holding files git tracks (what a clone has; generated output such as the
    demo's out/ is not part of the layout). Without git: every folder."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=root, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = [os.path.relpath(os.path.join(d, f), root)
                 for d, _, fs in os.walk(root) for f in fs]
    folders = set()
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            folders.add("/".join(parts[:i]))
    return sorted(folders)


def misleading_folders(root):
    return [d for d in tracked_folders(root)
            if os.path.basename(d) in MISLEADING
            and not any(p in SKIP or p.startswith(".") for p in d.split("/"))]


def main():
    problems = []
    for crate in sorted(crates(ROOT)):
        for a, b in circles(crate):
            problems.append(f"circle: {os.path.relpath(a, ROOT)} <-> {os.path.relpath(b, ROOT)} "
                            "(each uses the other, directly or through other files)")
    for d in misleading_folders(ROOT):
        problems.append(f"folder {d}/: tools read `{os.path.basename(d)}` as tests or build "
                        "output; name it for what it holds")
    if problems:
        sys.exit("layout:\n  " + "\n  ".join(problems))
    print("layout: no circles between source files, no misleading folder names",
          file=sys.stderr)


if __name__ == "__main__":
    main()

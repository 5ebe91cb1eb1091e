#!/usr/bin/env python3
"""Every crates.io dependency in one configuration, whichever command builds it.

Cargo compiles a crate once per configuration (features, profile, dependencies), and it
resolves features for the packages a command selects. `make demo` (`cargo build --bin
segtool`), `make test` (`cargo test --workspace`) and the wheel (maturin's `cargo rustc -p
segtool-python --crate-type cdylib`) select different packages, so without help a shared
dependency gets a different feature set in each, and everything above it compiles again.
Host units (build scripts, proc-macros and what they use) are resolved apart from target
units, which splits crates such as serde even inside one command.

The `segtool-workspace-hack` crate (workspace-hack/) fixes that the way cargo-hakari does:
every workspace member depends on it, and it depends on each crate that would otherwise be
split, with the union of the features any command gives it, both as a normal and as a
build dependency (so host and target units are identical and cargo builds them once).

This script computes it from cargo's own unit graphs (`--unit-graph`, read with
RUSTC_BOOTSTRAP=1; nothing is compiled), rather than from a model of cargo's resolver:

    python3 scripts/one_build.py check      # exit 1, naming each split crate, if any
    python3 scripts/one_build.py generate   # rewrite workspace-hack/Cargo.toml until none

`make test` runs `check` first, so a new dependency cannot quietly split the build again.
A crate "agrees" when every unit of it in all the graphs has the same features, opt-level,
debug info and debug assertions. The workspace's own libraries are checked too (their
dependents' manifests must ask for the same features: the hack cannot unify them).
"""
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HACK_DIR = os.path.join(ROOT, "workspace-hack")
HACK_TOML = os.path.join(HACK_DIR, "Cargo.toml")
HACK_PACKAGE = "segtool-workspace-hack"

# The commands whose builds must share every artefact: the demo's build (every front end
# but the Python extension), the CLI alone (`cargo build --bin segtool`), the test build
# (as scripts/run_tests.py runs it), and the wheel's build, both as `cargo rustc -p
# segtool-python --crate-type cdylib` and exactly as maturin 1.16 runs it
# (scripts/python_tests.sh; maturin also sets PYO3_* variables, which only the PyO3
# chain reads, and only the wheel builds that chain).
COMMANDS = {
    "demo build": ["build", "--workspace", "--exclude", "segtool-python"],
    "CLI build": ["build", "--bin", "segtool"],
    "test build": ["test", "--workspace", "--no-run"],
    "wheel build": ["rustc", "-p", "segtool-python", "--lib", "--crate-type", "cdylib",
                    "--profile", "dev"],
    "maturin's build": ["rustc", "--profile", "dev", "--features", "pyo3/extension-module",
                        "--manifest-path", "python/Cargo.toml", "--lib"],
}

BEGIN = "### BEGIN GENERATED (scripts/one_build.py generate)"
END = "### END GENERATED"


def unit_graph(args):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    out = subprocess.run(["cargo", *args, "--unit-graph", "-Z", "unstable-options"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit(f"one_build: `cargo {' '.join(args)} --unit-graph` failed "
                 f"(exit {out.returncode})")
    return json.loads(out.stdout)["units"]


def crate_of(unit):
    """(name, version, registry?) of a unit's package: crates.io crates and workspace
    crates alike (a workspace library built with two feature sets compiles twice too)."""
    pkg = unit["pkg_id"]
    registry = pkg.startswith("registry+")
    tail = pkg.split("#", 1)[1] if "#" in pkg else pkg
    if "@" in tail:
        name, version = tail.rsplit("@", 1)
    else:  # path+file:///work/main/runtime#0.1.0: the folder names the package
        name, version = pkg.split("#")[0].rstrip("/").rsplit("/", 1)[-1], tail
    return name, version, registry


def configurations(graphs):
    """{(name, version, registry?): {config: {command, ...}}} over library units: every
    crates.io crate, and the workspace's own libraries. The config is what makes two
    units of one crate different artefacts."""
    found = defaultdict(lambda: defaultdict(set))
    for command, units in graphs.items():
        for u in units:
            kinds = u["target"]["kind"]
            if u["mode"] != "build" or "custom-build" in kinds:
                continue  # the library unit stands for its build script's units too
            crate = crate_of(u)
            if not crate[2] and not {"lib", "rlib", "cdylib", "proc-macro"} & set(kinds):
                continue  # a workspace binary or example: its own command's business
            p = u["profile"]
            config = (tuple(u["features"]), p["opt_level"], p["debuginfo"],
                      p["debug_assertions"])
            found[crate][config].add(command)
    return found


def splits(found):
    return {crate: configs for crate, configs in found.items() if len(configs) > 1}


def describe(split):
    lines = []
    for (name, version, registry), configs in sorted(split.items()):
        where = "" if registry else " (a workspace crate, which the workspace hack cannot " \
            "unify: its dependents' features and the profiles must agree)"
        lines.append(f"  {name} {version}{where}:")
        for (features, opt, debug, asserts), commands in sorted(configs.items()):
            lines.append(f"    {', '.join(sorted(commands))}: features [{', '.join(features)}], "
                         f"opt-level {opt}, debuginfo {debug}, debug-assertions {asserts}")
    return "\n".join(lines)


def read_generated():
    """{(name, version): features} as workspace-hack/Cargo.toml lists them now."""
    text = open(HACK_TOML).read()
    body = text[text.index(BEGIN):text.index(END)]
    listed = {}
    # the same entries appear under [dependencies] and [build-dependencies]; read the first
    section = body.split("[build-dependencies]")[0]
    for line in section.splitlines():
        m = re.match(r'^([\w-]+) = \{ (?:package = "([\w-]+)", )?version = "([^"]+)", '
                     r'default-features = false, features = \[([^\]]*)\] \}', line)
        if m:
            name = m.group(2) or m.group(1)
            features = [f.strip().strip('"') for f in m.group(4).split(",") if f.strip()]
            listed[(name, m.group(3))] = set(features)
    # keys as the unit graph spells versions (with build metadata, e.g. toml's +spec-1.1.0)
    return {next((c for c in locked() if c[0] == n and c[1].split("+")[0] == v), (n, v)): f
            for (n, v), f in listed.items()}


def locked():
    """(name, version) of every package in Cargo.lock."""
    text = open(os.path.join(ROOT, "Cargo.lock")).read()
    return re.findall(r'\[\[package\]\]\nname = "([^"]+)"\nversion = "([^"]+)"', text)


def write_generated(entries):
    """Rewrites the generated part of workspace-hack/Cargo.toml from {(name, version):
    features}."""
    names = defaultdict(list)
    for name, version in entries:
        names[name].append(version)
    lines = []
    for (name, version), features in sorted(entries.items()):
        key = name if len(names[name]) == 1 else f"{name}-v{version.split('.')[0]}" \
            if version.split('.')[0] != "0" else f"{name}-v0-{version.split('.')[1]}"
        pkg = "" if key == name else f'package = "{name}", '
        feats = ", ".join(f'"{f}"' for f in sorted(features))
        requirement = version.split("+")[0]  # semver build metadata plays no part
        lines.append(f'{key} = {{ {pkg}version = "{requirement}", default-features = false, '
                     f'features = [{feats}] }}')
    block = "\n".join([BEGIN, "[dependencies]", *lines, "", "[build-dependencies]", *lines, END])
    text = open(HACK_TOML).read()
    text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    tmp = HACK_TOML + ".tmp"
    open(tmp, "w").write(text)
    os.replace(tmp, HACK_TOML)


def graphs():
    return {command: unit_graph(args) for command, args in COMMANDS.items()}


def members_without_hack():
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                                     cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     check=True).stdout)
    missing = []
    for pkg in meta["packages"]:
        if pkg["name"] == HACK_PACKAGE:
            continue
        if not any(d["name"] == HACK_PACKAGE and d["kind"] is None for d in pkg["dependencies"]):
            missing.append(pkg["name"])
    return missing


def check():
    missing = members_without_hack()
    if missing:
        sys.exit(f"one_build: these workspace members do not depend on {HACK_PACKAGE}: "
                 f"{', '.join(missing)}\n  add `{HACK_PACKAGE}.workspace = true` to their "
                 "[dependencies]")
    found = configurations(graphs())
    split = splits(found)
    if split:
        sys.exit("one_build: crates.io crates built in more than one configuration by "
                 f"{', '.join(COMMANDS)}:\n{describe(split)}\n"
                 "  run `python3 scripts/one_build.py generate` and commit workspace-hack/")
    registry = sum(1 for c in found if c[2])
    print(f"one build: {registry} crates.io crates and {len(found) - registry} workspace "
          f"libraries, each in one configuration across {', '.join(COMMANDS)}", file=sys.stderr)


def generate():
    entries = read_generated()
    write_generated(entries)  # normalised, so that an unchanged list reads the same
    for round_ in range(1, 11):
        found = configurations(graphs())
        split = splits(found)
        if not split:
            print(f"one build: no split crate after {round_ - 1} change(s); "
                  f"{len(entries)} crates in {HACK_PACKAGE}", file=sys.stderr)
            return
        print(f"round {round_}: {len(split)} split crate(s):\n{describe(split)}", file=sys.stderr)
        own = [c for c in split if not c[2]]
        if own:
            sys.exit("one_build: workspace crates built with different features (fix their "
                     "dependents' manifests):\n" + describe({c: split[c] for c in own}))
        for (name, version, _), configs in split.items():
            union = set(entries.get((name, version), set()))
            for features, *_ in configs:
                union.update(features)
            entries[(name, version)] = union
        write_generated(entries)
    sys.exit("one_build: still split after 10 rounds:\n" + describe(split))


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "check"
    {"check": check, "generate": generate}.get(what, lambda: sys.exit(__doc__))()

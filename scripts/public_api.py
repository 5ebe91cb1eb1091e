#!/usr/bin/env python3
"""The runtime's public API as text, so that it changes only on purpose; `make test` runs
`check`.

rustdoc's JSON (`--output-format json`; on the stable toolchain through
scripts/rustdoc_json.sh, which sets RUSTC_BOOTSTRAP for rustdoc alone) is walked from the
crate root along public paths: every module, type, field, variant, constant, function and
method (with its signature), and the trait implementations a type declares itself
(derives included; auto traits and blanket implementations left out, as
they follow from the rest). One line per item, sorted: a diff names what changed.

    python3 scripts/public_api.py check   # exit 1 with the diff when the API differs
    python3 scripts/public_api.py bless   # rewrite runtime/public-api.txt
"""
import difflib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNAPSHOT = os.path.join(ROOT, "runtime", "public-api.txt")
CRATE = "segtool_runtime"


def rustdoc_json():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    env = dict(os.environ, RUSTDOC=os.path.join(ROOT, "scripts", "rustdoc_json.sh"))
    env.pop("RUSTC_BOOTSTRAP", None)
    subprocess.run(
        ["cargo", "rustdoc", "-q", "-p", "segtool-runtime", "--lib", "--",
         "-Z", "unstable-options", "--output-format", "json", "--cap-lints", "allow"],
        cwd=ROOT, env=env, check=True)
    with open(os.path.join(target, "doc", f"{CRATE}.json")) as f:
        return json.load(f)


class Api:
    def __init__(self, doc):
        self.index, self.paths = doc["index"], doc["paths"]
        self.lines = set()
        self.root = doc["root"]

    def name_of(self, ref):
        path = self.paths.get(str(ref["id"]), {}).get("path")
        return path[-1] if path else ref["path"].split("::")[-1]

    def ty(self, t):
        if t is None:
            return "()"
        (kind, v), = t.items()
        if kind == "primitive" or kind == "generic":
            return v
        if kind == "resolved_path":
            return self.name_of(v) + self.args(v.get("args"))
        if kind == "borrowed_ref":
            life = f"{v['lifetime']} " if v.get("lifetime") else ""
            return f"&{life}{'mut ' if v['is_mutable'] else ''}{self.ty(v['type'])}"
        if kind == "raw_pointer":
            return f"*{'mut' if v['is_mutable'] else 'const'} {self.ty(v['type'])}"
        if kind == "slice":
            return f"[{self.ty(v)}]"
        if kind == "array":
            return f"[{self.ty(v['type'])}; {v['len']}]"
        if kind == "tuple":
            return "(" + ", ".join(self.ty(x) for x in v) + ")"
        if kind in ("impl_trait", "dyn_trait"):
            bounds = v if kind == "impl_trait" else v["traits"]
            names = []
            for b in bounds:
                tr = b.get("trait_bound", b).get("trait")
                if tr:
                    names.append(self.name_of(tr) + self.args(tr.get("args")))
            return ("impl " if kind == "impl_trait" else "dyn ") + " + ".join(names)
        if kind == "qualified_path":
            return f"<{self.ty(v['self_type'])}>::{v['name']}"
        if kind == "function_pointer":
            sig = v["sig"]
            return "fn(" + ", ".join(self.ty(x) for _, x in sig["inputs"]) + ") -> " + \
                self.ty(sig.get("output"))
        return kind

    def args(self, args):
        if not args or "angle_bracketed" not in args:
            if args and "parenthesized" in args:
                p = args["parenthesized"]
                return "(" + ", ".join(self.ty(x) for x in p["inputs"]) + ") -> " + \
                    self.ty(p.get("output"))
            return ""
        out = []
        for a in args["angle_bracketed"]["args"]:
            if "type" in a:
                out.append(self.ty(a["type"]))
            elif "const" in a:
                out.append(str(a["const"].get("expr")))
        for c in args["angle_bracketed"].get("constraints", []):
            if "equality" in c.get("binding", {}):
                out.append(f"{c['name']} = {self.ty(c['binding']['equality'].get('type'))}")
        return f"<{', '.join(out)}>" if out else ""

    def fn(self, path, f):
        sig = f["sig"]
        params = ", ".join(self.param(n, t) for n, t in sig["inputs"])
        out = sig.get("output")
        unsafe = "unsafe " if f["header"]["is_unsafe"] else ""
        return f"{unsafe}fn {path}({params})" + (f" -> {self.ty(out)}" if out else "")

    def param(self, name, t):
        if name != "self":
            return f"{name}: {self.ty(t)}"
        ref = t.get("borrowed_ref")
        if ref and ref["type"] == {"generic": "Self"}:
            return "&mut self" if ref["is_mutable"] else "&self"
        return "self" if t == {"generic": "Self"} else f"self: {self.ty(t)}"

    def item(self, id_, path, seen):
        it = self.index.get(str(id_))
        if it is None:  # from another crate, re-exported
            self.lines.add(f"use {path}")
            return
        if it["visibility"] != "public" and "use" not in it["inner"]:
            return
        (kind, v), = it["inner"].items()
        if kind == "use":
            name = v["name"]
            if v.get("is_glob"):
                self.lines.add(f"use {path}::{v['source']}::*")
            elif v.get("id") is not None:
                self.item(v["id"], f"{path}::{name}", seen)
            return
        if (id_, path) in seen:
            return
        seen.add((id_, path))
        if kind == "module":
            self.lines.add(f"mod {path}")
            for child in v["items"]:
                c = self.index.get(str(child))
                name = c.get("name") if c else None
                self.item(child, f"{path}::{name}" if name else path, seen)
        elif kind == "function":
            self.lines.add(self.fn(path, v))
        elif kind in ("struct", "enum", "union", "trait"):
            self.lines.add(f"{kind} {path}")
            self.members(kind, v, path, seen)
        elif kind in ("constant", "static"):
            self.lines.add(f"const {path}: {self.ty(v.get('type'))}")
        elif kind == "type_alias":
            self.lines.add(f"type {path} = {self.ty(v['type'])}")
        else:
            self.lines.add(f"{kind} {path}")

    def members(self, kind, v, path, seen):
        if kind == "struct" and "plain" in v["kind"]:
            for f in v["kind"]["plain"]["fields"]:
                fi = self.index[str(f)]
                if fi["visibility"] == "public":
                    self.lines.add(f"field {path}::{fi['name']}: {self.ty(fi['inner']['struct_field'])}")
        if kind == "enum":
            for var in v["variants"]:
                self.lines.add(f"variant {path}::{self.index[str(var)]['name']}")
        if kind == "trait":
            for m in v["items"]:
                mi = self.index[str(m)]
                if "function" in mi["inner"]:
                    self.lines.add(self.fn(f"{path}::{mi['name']}", mi["inner"]["function"]))
            return
        for impl_id in v.get("impls", []):
            imp = self.index[str(impl_id)]["inner"]["impl"]
            if imp["is_synthetic"] or imp.get("blanket_impl"):
                continue
            if imp["trait"]:
                self.lines.add(f"impl {self.name_of(imp['trait'])} for {path}")
                continue
            for m in imp["items"]:
                mi = self.index[str(m)]
                if mi["visibility"] == "public" and "function" in mi["inner"]:
                    self.lines.add(self.fn(f"{path}::{mi['name']}", mi["inner"]["function"]))
                elif mi["visibility"] == "public" and "assoc_const" in mi["inner"]:
                    self.lines.add(f"const {path}::{mi['name']}")


def render():
    """The snapshot's text and the number of items at the crate root."""
    doc = rustdoc_json()
    api = Api(doc)
    api.item(doc["root"], CRATE, set())
    root = len(doc["index"][str(doc["root"])]["inner"]["module"]["items"])
    return "".join(line + "\n" for line in sorted(api.lines)), root


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    now, root = render()
    if mode == "bless":
        with open(SNAPSHOT, "w") as f:
            f.write(now)
        print(f"wrote {SNAPSHOT}: {now.count(chr(10))} items")
        return 0
    old = open(SNAPSHOT).read() if os.path.exists(SNAPSHOT) else ""
    if old == now:
        print(f"runtime public API: {now.count(chr(10))} items as pinned ({root} at the root)")
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        old.splitlines(True), now.splitlines(True), "runtime/public-api.txt", "now"))
    print("\nThe runtime's public API changed. If on purpose: python3 scripts/public_api.py bless")
    return 1


if __name__ == "__main__":
    sys.exit(main())

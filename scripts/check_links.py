#!/usr/bin/env python3
"""Every link of the given Markdown files (and folders of them) must point at a file of
the repository (relative to the linking file; `#anchors` are not checked) or at a public
page (http/https). A link that leaves the repository through `..` is an error: what lies
outside the clone (design notes of a workspace, a sibling checkout) is not there for a
user. Prints each bad link with its file and line; exits 1 if there is any."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files(args):
    for arg in args:
        if os.path.isdir(arg):
            for folder, _, files in os.walk(arg):
                yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".md"))
        else:
            yield arg


def problems(path):
    in_code = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for target in LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            file_part = target.split("#", 1)[0]
            resolved = os.path.abspath(os.path.join(os.path.dirname(path), file_part))
            if not resolved.startswith(ROOT + os.sep) and resolved != ROOT:
                yield n, target, "leaves the repository"
            elif not os.path.exists(resolved):
                yield n, target, "no such file"
    # Plain-text mentions of files outside the clone are dead links too.
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if "../shared/" in line:
            yield n, "../shared/...", "names a file outside the repository"


def main():
    bad = 0
    files = list(markdown_files(sys.argv[1:] or ["README.md", "book/src"]))
    for path in files:
        for n, target, why in problems(path):
            print(f"{path}:{n}: {target}: {why}")
            bad += 1
    print(f"links: {len(files)} files checked, {bad} bad", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

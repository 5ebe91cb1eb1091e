#!/usr/bin/env bash
# The user guide (book/): mdBook builds it into target/book, then scripts/check_links.py
# checks every link of the book and the README. Needs SEGTOOL_MDBOOK (scripts/setup.sh
# with SEGTOOL_BOOK=1, as `make test` runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
mdbook="${SEGTOOL_MDBOOK:-}"
if [ -z "$mdbook" ] || [ ! -x "$mdbook" ]; then
    echo "book.sh: no mdbook at '${mdbook}': run the set-up with SEGTOOL_BOOK=1 (make test does)" >&2
    exit 1
fi
rm -rf target/book
log="$(mktemp)"
if ! "$mdbook" build book >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "book.sh: mdbook build failed" >&2
    exit 1
fi
# Warnings (a missing file, a bad link mdBook sees) are shown; its INFO lines are not.
grep -v ' INFO ' "$log" >&2 || true
rm -f "$log"
test -f target/book/index.html || { echo "book.sh: mdbook wrote no index.html" >&2; exit 1; }
python3 scripts/check_links.py README.md book/src

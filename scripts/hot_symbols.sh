#!/usr/bin/env bash
# Regenerate link/hot-symbols.txt: the functions the CLI's everyday commands
# execute, which build.rs asks the linker to place first in the release
# binary's .text.
#
# Why: a CLI process runs ~12 MB of a ~160 MB .text, scattered across it. The
# kernel maps file pages around each fault (64 KiB), so a one-row `mutate`
# was resident on ~90 MB of code and paid ~1,400 page faults. Packed
# together, the executed code is a few contiguous megabytes.
#
# How: each command runs once under `valgrind --tool=callgrind` (which lists
# every function executed, with mangled names), against a graph built from
# examples/. Symbols used by more commands come first; within a count, the
# order callgrind first met them. Names absent from a later build are
# ignored by the linker, so a stale list only loses locality, never breaks
# the build; rerun this after a dependency or toolchain upgrade.
#
# Usage: scripts/hot_symbols.sh [path/to/release/omnigraph]
# Needs valgrind, nm and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/omnigraph}")
OUT=link/hot-symbols.txt
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

G="$WORK/g"
run() {
  local tag=$1
  shift
  valgrind --tool=callgrind --demangle=no --dump-instr=no \
    --callgrind-out-file="$WORK/cg.$tag" "$BIN" "$@" >/dev/null 2>"$WORK/log.$tag" ||
    { echo "hot_symbols: '$*' failed:" >&2; cat "$WORK/log.$tag" >&2; exit 1; }
}

run init init --schema examples/social.pg "$G"
run load_append load --data examples/social.jsonl --mode append "$G"
grep '"Person"' examples/social.jsonl >"$WORK/people.jsonl"
run load_merge load --json --data "$WORK/people.jsonl" --mode merge "$G"
run insert mutate -e 'query q() { insert Person { name: "Zed", age: 30 } }' "$G"
run update mutate --json -e 'query q() { update Person set { age: 32 } where name = "Alice" }' "$G"
run delete mutate -e 'query q() { delete Person where name = "Zed" }' "$G"
run snapshot snapshot "$G"
run snapshot_json snapshot --json "$G"
run query query -e 'query q() { match { $p: Person } return { $p.name, $p.age } }' "$G"
run query_json query --json -e 'query q() { match { $a: Person $a knows $b } return { $a.name, $b.name } }' "$G"
run branch_create branch create review "$G"
run branch_mutate mutate -e 'query q() { insert Person { name: "Yan" } }' --branch review "$G"
run branch_list branch list "$G"
run commit_list commit list "$G"
run export export "$G"
run load_overwrite load --data examples/social.jsonl --mode overwrite "$G"

mkdir -p link
nm --defined-only "$BIN" | awk '$2 ~ /^[tTwW]$/ {print $3}' >"$WORK/defined"
python3 - "$WORK" "$OUT" <<'EOF'
import glob, re, sys
work, out = sys.argv[1], sys.argv[2]
defined = set(open(f"{work}/defined").read().split())
uses, first = {}, {}
for path in sorted(glob.glob(f"{work}/cg.*")):
    seen = set()
    for m in re.finditer(r"^c?fn=\(\d+\) (\S+)", open(path).read(), re.M):
        name = m.group(1)
        if name in defined and name not in seen:
            seen.add(name)
            first.setdefault(name, len(first))
    for name in seen:
        uses[name] = uses.get(name, 0) + 1
order = sorted(uses, key=lambda n: (-uses[n], first[n]))
with open(out, "w") as f:
    f.write("\n".join(order) + "\n")
print(f"hot_symbols: {len(order)} symbols from {len(glob.glob(f'{work}/cg.*'))} commands -> {out}")
EOF

#!/usr/bin/env python3
"""Every proc macro in the dependency graph (all features) is built at
opt-level 0 in dev builds, as Cargo.toml lists them.

`[profile.dev.package."*"] opt-level = 3` (fast tests) also optimises
the proc macros and syn, since it takes precedence over `build-override`;
that cost about 170 s of a cold `cargo build --tests` on CI's 2 cores
(f200548). Cargo has no wildcard for proc macros, so Cargo.toml names
them, and a dependency that brings a new one would quietly slow CI:
this check names it instead.

    scripts/check-dev-profile.py    (from the repository root)
"""
import json
import re
import subprocess
import sys

# Not proc macros themselves, but compiled into them only: listed too.
HELPERS = {"syn", "quote", "proc-macro2"}
# The resolve for this machine's target only (not Windows' or wasm's).
HOST = next(
    line.split()[1]
    for line in subprocess.run(
        ["rustc", "-vV"], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    if line.startswith("host:")
)

meta = json.loads(
    subprocess.run(
        [
            "cargo", "metadata", "--locked", "--format-version", "1", "--all-features",
            "--filter-platform", HOST,
        ],
        check=True,
        capture_output=True,
    ).stdout
)
used = {n["id"] for n in meta["resolve"]["nodes"]}
macros = {
    p["name"]
    for p in meta["packages"]
    if p["id"] in used and any("proc-macro" in t["kind"] for t in p["targets"])
}
# A regular expression, not tomllib: that needs Python 3.11.
with open("Cargo.toml") as f:
    listed = set(
        re.findall(r"^\[profile\.dev\.package\.([\w-]+)\]\nopt-level = 0$", f.read(), re.M)
    )
missing = sorted((macros | HELPERS) - listed)
if missing:
    print("Cargo.toml: add to the dev profile at opt-level 0 (see [profile.dev.package.syn]):")
    for name in missing:
        print(f"[profile.dev.package.{name}]\nopt-level = 0\n")
    sys.exit(1)
print(f"{len(macros)} proc macros, all at opt-level 0 in dev builds")

#!/usr/bin/env python3
"""Every public path of each item of the runtime, read from rustdoc's JSON output; lists the items that
are reachable by more than one path and the names at the crate root. Exits 1 if a name has two paths or the
root holds more than 30 names (modules not counted).

The JSON output needs the nightly toolchain (a build directory of its own, so the workspace's stays warm):

    CARGO_TARGET_DIR=target/rustdoc-json cargo +nightly rustdoc -p agent-airlock --all-features -- \\
        -Z unstable-options --output-format json
    python3 scripts/public_paths.py target/rustdoc-json/doc/agent_airlock.json

A path is a chain of public modules from the root, ending in the item's name or in a `pub use` of it
(glob re-exports expanded). Items of other crates re-exported here (the grammar's `MaskKind`, say) count
as this crate's names.
"""
import json
import sys
from collections import defaultdict

MAX_ROOT_NAMES = 30

doc = json.load(open(sys.argv[1]))
index, root = doc["index"], doc["root"]
paths = defaultdict(set)


def kind(item):
    return next(iter(item["inner"])) if isinstance(item["inner"], dict) else item["inner"]


def walk(module_id, prefix, seen):
    if module_id in seen or str(module_id) not in index:
        return
    seen = seen | {module_id}
    for item_id in index[str(module_id)]["inner"]["module"]["items"]:
        item = index.get(str(item_id))
        if item is None or item.get("visibility") != "public":
            continue
        if kind(item) == "use":
            use = item["inner"]["use"]
            target = use.get("id")
            if use.get("is_glob"):
                if target is not None:
                    walk(target, prefix, seen)
                continue
            paths[str(target) if target is not None else "ext:" + use["source"]].add("::".join(prefix + [use["name"]]))
            reexported = index.get(str(target)) if target is not None else None
            if reexported is not None and kind(reexported) == "module":
                walk(target, prefix + [use["name"]], seen)
        else:
            paths[str(item_id)].add("::".join(prefix + [item["name"]]))
            if kind(item) == "module":
                walk(item_id, prefix + [item["name"]], seen)


walk(root, [], frozenset())
twice = sorted(sorted(found) for found in paths.values() if len(found) > 1)
for found in twice:
    print("two paths: " + "  ".join(found))
root_names = sorted(
    p
    for item_id, found in paths.items()
    for p in found
    if "::" not in p and not (item_id in index and kind(index[item_id]) == "module")
)
print(f"{len(root_names)} names at the crate root (modules not counted): {', '.join(root_names)}")
print(f"{sum(len(found) for found in paths.values())} public paths, {len(twice)} items with more than one")
sys.exit(1 if twice or len(root_names) > MAX_ROOT_NAMES else 0)

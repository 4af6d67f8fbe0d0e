#!/usr/bin/env python3
"""Import cycles between the runtime's source files.

Each `crate::…`, `super::…` or `self::…` path in a file (in `use` lines and inline paths, test modules
excluded) is an edge to the file that defines the item it names: the file of the longest module prefix,
followed through that file's re-exports (`pub use child::Item`) to the file the item is written in. A
re-export alone is not an edge, nor is `mod child;`: a parent that only declares and re-exports its
children does not depend on them. A cycle is a strongly connected component of more than one file.
Exits 1 if there is any.

    python3 scripts/import_cycles.py [runtime/src]
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "runtime", "src")
root = os.path.normpath(root)

modules = {}  # module path tuple -> file
for dirpath, _, files in os.walk(root):
    for f in files:
        if not f.endswith(".rs"):
            continue
        rel = os.path.relpath(os.path.join(dirpath, f), root)
        parts = rel[:-3].split(os.sep)
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        modules[tuple(parts)] = rel


def strip_tests(text):
    # drop `#[cfg(test)] mod … { … }` blocks by brace matching
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(#\[[^\]]*\]\s*(//[^\n]*\s*)?)*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def resolve(path):
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in modules:
            return modules[tuple(path[:n])]
    return None


alias = {}  # a use path -> the name it is imported as


def expand_use(body):
    """Expand a `use` tree into its paths (enough for `a::{b, c::{d}}` shapes)."""
    body = re.sub(r"\s+as\s+", "@", body)
    body = re.sub(r"\s+", "", body)

    def walk(prefix, s):
        paths, depth, cur = [], 0, ""
        items = []
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                items.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            items.append(cur)
        for item in items:
            m = re.match(r"^(.*?)::\{(.*)\}$", item)
            if m:
                paths += walk(prefix + m.group(1).split("::"), m.group(2))
            elif item.startswith("{") and item.endswith("}"):
                paths += walk(prefix, item[1:-1])
            else:
                path = prefix + item.split("@")[0].split("::")
                alias[tuple(path)] = item.split("@")[1] if "@" in item else path[-1]
                paths.append(path)
        return paths

    return walk([], body)


texts = {}
reexports = {}  # file -> {name: target path}
for mod, f in modules.items():
    text = strip_comments(strip_tests(open(os.path.join(root, f), encoding="utf-8").read()))
    texts[f] = text
    own = list(mod)
    table = {}
    for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
        for p in expand_use(m.group(1)):
            p = [x for x in p if x]
            if not p:
                continue
            name = alias.get(tuple(p), p[-1])
            if p[0] == "crate":
                target = p[1:]
            elif p[0] == "super":
                base = own[:]
                while p and p[0] == "super":
                    base = base[:-1]
                    p = p[1:]
                target = base + p
            elif p[0] == "self":
                target = own + p[1:]
            elif tuple(own + [p[0]]) in modules:
                target = own + p
            else:
                continue
            table[name] = target
    reexports[f] = table


def locate(target, depth=0):
    for n in range(len(target), 0, -1):
        if tuple(target[:n]) in modules:
            f = modules[tuple(target[:n])]
            rest = target[n:]
            if rest and rest[0] in reexports[f] and depth < 20:
                return locate(reexports[f][rest[0]], depth + 1) or f
            return f
    return None


edges = {f: set() for f in modules.values()}
why = {}
for mod, f in modules.items():
    text = texts[f]
    own = list(mod)
    refs = []
    for m in re.finditer(r"(?<!pub )(?<!\) )\buse\s+([^;]+);", text):
        if re.search(r"pub(\([^)]*\))?\s+$", text[max(0, m.start() - 20) : m.start()]):
            continue
        refs += expand_use(m.group(1))
    for m in re.finditer(r"\bcrate((?:::\w+)+)", text):
        refs.append(["crate"] + m.group(1).split("::")[1:])
    for p in refs:
        p = [x for x in p if x]
        if not p:
            continue
        if p[0] == "crate":
            target = p[1:]
        elif p[0] == "super":
            base = own[:]
            while p and p[0] == "super":
                base = base[:-1]
                p = p[1:]
            target = base + p
        elif p[0] == "self":
            target = own + p[1:]
        else:
            continue
        t = locate(target)
        if t and t != f:
            edges[f].add(t)
            why.setdefault((f, t), "::".join(target))

# Tarjan
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))


for v in sorted(edges):
    if v not in index:
        visit(v)

for comp in sccs:
    print("cycle:", " ".join(comp))
    for a in comp:
        for b in sorted(edges[a] & set(comp)):
            print(f"  {a} -> {b}  ({why[(a, b)]})")
print(f"{len(modules)} files, {len(sccs)} cycles")
sys.exit(1 if sccs else 0)

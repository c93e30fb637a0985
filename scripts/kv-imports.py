#!/usr/bin/env python3
"""Lists the module-level import edges of cairn-kv and checks that they point down.

Reads crates/cairn-kv/src (test modules, comments and strings left out), resolves every
`crate::`, `super::`, `self::` and submodule-relative path (in `use` trees and in code) to the
module that defines the item, following `pub use` re-exports (a parent's `pub use` of its own
submodules' items is the face of its subtree and not counted as an edge), and prints:

  - every edge `a::b -> c::d` between two modules (files), with how many paths make it;
  - the circles among modules (strongly connected components of more than one module);
  - the same two at the level of the top-level modules (`db`, `write`, `wal`, ...);
  - the edges that point up: from a top-level module to one listed after it in LAYERS,
    lowest first.

Exits 1 if there is a circle at either level or an upward edge not in ALLOWED_UP.

  scripts/kv-imports.py                 # the report
  scripts/kv-imports.py --edges         # only the edges, one per line
  scripts/kv-imports.py --map FILE      # place modules in top-level modules by FILE's lines
                                        # `module top` (for a layout without directories:
                                        # scripts/kv-imports-flat-map.txt places the files
                                        # of the flat layout before issue 77)
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "cairn-kv", "src")

# Top-level modules, lowest first: a module may import from those before it. `testing` (test
# and benchmark fixtures) and the crate root sit above everything.
LAYERS = [
    "error", "coding", "key", "options", "flow",
    "storage", "iter", "memtable", "wal", "block", "cache", "table", "version", "compaction", "write",
    "db", "internals", "testing", "crate",
]

# Upward edges allowed, each explained at the import in the code.
ALLOWED_UP = {
}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts == ["lib"]:
        return "crate"
    return "::".join(parts)


def strip(text):
    """The production code: no `#[cfg(test)]` items, comments or string contents."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text[i] == '"' and not (i > 0 and text[i - 1] in "'#"):
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif text.startswith("'\"'", i):
            out.append("' '")
            i += 3
        else:
            out.append(text[i])
            i += 1
    code = "".join(out)
    # Drop every item after `#[cfg(test)]` (its braces balanced), and lone `#[cfg(test)]` lines.
    while True:
        m = re.search(r"#\[cfg\(test\)\]", code)
        if not m:
            return code
        j = m.end()
        depth = 0
        k = j
        while k < len(code):
            c = code[k]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            elif c == ";" and depth == 0:
                k += 1
                break
            k += 1
        code = code[: m.start()] + code[k:]


def use_trees(code):
    """Every `use` statement's paths, expanded: ("crate::a::B", is_pub)."""
    for m in re.finditer(r"(pub(?:\([a-z]+\))?\s+)?use\s+([^;]+);", code):
        is_pub = m.group(1) is not None
        tree = re.sub(r"\s*([{},]|::)\s*", r"\1", m.group(2).strip())
        for p in expand(re.sub(r"\s+as\s+", " as ", tree)):
            yield p, is_pub


def expand(tree):
    """`a::{b,c::{d,e}}` -> [a::b, a::c::d, a::c::e] (`x as y` kept as `x as y`)."""
    depth = 0
    for i, c in enumerate(tree):
        if c == "{":
            if depth == 0:
                prefix = tree[:i]
                inner = tree[i + 1: tree.rfind("}")]
                parts, d, start = [], 0, 0
                for j, cc in enumerate(inner):
                    if cc == "{":
                        d += 1
                    elif cc == "}":
                        d -= 1
                    elif cc == "," and d == 0:
                        parts.append(inner[start:j])
                        start = j + 1
                parts.append(inner[start:])
                return [x for p in parts if p for x in expand(prefix + p)]
            depth += 1
    return [tree]


def main():
    args = sys.argv[1:]
    only_edges = "--edges" in args
    top_map = {}
    if "--map" in args:
        with open(args[args.index("--map") + 1]) as f:
            for line in f:
                if line.split():
                    mod, top = line.split()
                    top_map[mod] = top

    files = {}
    for d, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(d, name)
                with open(path) as f:
                    files[module_of(path)] = strip(f.read())
    modules = set(files)

    def absolute(path, here):
        """`super::x` / `self::x` / `crate::x` from module `here`, as `crate::...` segments."""
        segs = path.split("::")
        base = [] if here == "crate" else here.split("::")
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("super", "self"):
            cur = list(base)
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    cur = cur[:-1]
            return cur + segs
        # A path that starts with a child module of `here` (in the crate root: any top-level
        # module, as lib.rs's `pub use db::Db`) is relative to `here`.
        child = segs[0] if here == "crate" else here + "::" + segs[0]
        if child in modules:
            return base + segs
        return None

    # Re-exports: (module, name) -> absolute path of what it names.
    reexports = {}
    for mod, code in files.items():
        for p, is_pub in use_trees(code):
            if not is_pub:
                continue
            target, _, alias = p.partition(" as ")
            segs = absolute(target, mod)
            if segs is None or not segs:
                continue
            name = alias or segs[-1]
            if name != "*":
                reexports[(mod, name)] = segs

    def resolve(segs, seen=0):
        """The module that defines what `crate::<segs>` names."""
        best = "crate"
        for i in range(len(segs), 0, -1):
            cand = "::".join(segs[:i])
            if cand in modules:
                best, rest = cand, segs[i:]
                break
        else:
            rest = segs
        if rest and (best, rest[0]) in reexports and seen < 10:
            return resolve(reexports[(best, rest[0])] + rest[1:], seen + 1)
        return best

    edges = defaultdict(int)
    for mod, code in files.items():
        # A parent's `pub use` of its own submodules' items is the face of its subtree (as
        # `storage`'s `pub use fs::FsStorage`), not a dependency of the parent: not counted.
        paths = []
        for p, is_pub in use_trees(code):
            p = p.partition(" as ")[0]
            segs = absolute(p, mod)
            if is_pub and segs and mod != "crate" and "::".join(segs).startswith(mod + "::"):
                continue
            paths.append(p)
        body = re.sub(r"(pub(?:\([a-z]+\))?\s+)?use\s+[^;]+;", "", code)
        paths += re.findall(r"\b(?:crate|super|self)(?:::" + IDENT + r")+", body)
        for p in paths:
            segs = absolute(p, mod)
            if segs is None:
                continue
            target = resolve(segs)
            if target not in (mod, "crate"):
                edges[(mod, target)] += 1

    def top(m):
        return top_map.get(m, m.split("::")[0])

    if only_edges:
        for (a, b), n in sorted(edges.items()):
            print(f"{a} -> {b}")
        return 0

    def circles(nodes, es):
        graph = defaultdict(set)
        for a, b in es:
            if a != b:
                graph[a].add(b)
        index, low, stack, on, out = {}, {}, [], set(), []
        counter = [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(graph[v]):
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
                    out.append(sorted(comp))

        sys.setrecursionlimit(10000)
        for v in sorted(nodes):
            if v not in index:
                visit(v)
        return out

    print(f"# cairn-kv module imports: {len(modules)} modules, {len(edges)} edges")
    for (a, b), n in sorted(edges.items()):
        print(f"{a} -> {b}" + (f" ({n})" if n > 1 else ""))
    file_circles = circles(modules, edges)
    print(f"\n# circles among modules: {len(file_circles)}")
    for c in file_circles:
        print("  " + " <-> ".join(c))
    top_edges = defaultdict(int)
    for (a, b), n in edges.items():
        if top(a) != top(b):
            top_edges[(top(a), top(b))] += n
    print(f"\n# top-level modules: {len({top(m) for m in modules})}, {len(top_edges)} edges")
    for (a, b), n in sorted(top_edges.items()):
        print(f"{a} -> {b} ({n})")
    top_circles = circles({top(m) for m in modules}, top_edges)
    print(f"\n# circles among top-level modules: {len(top_circles)}")
    for c in top_circles:
        print("  " + " <-> ".join(c))
    rank = {name: i for i, name in enumerate(LAYERS)}
    unplaced = sorted({top(m) for m in modules} - set(rank))
    if unplaced:
        print(f"\n# top-level modules not in LAYERS: {' '.join(unplaced)}")
    up = sorted(
        (a, b) for (a, b) in edges if top(a) in rank and top(b) in rank and rank[top(b)] > rank[top(a)]
    )
    print(f"\n# upward edges (to a later top-level module in LAYERS): {len(up)}")
    bad = 0
    for a, b in up:
        ok = (a, b) in ALLOWED_UP
        bad += not ok
        print(f"  {a} -> {b}" + ("  (allowed: " + ALLOWED_UP[(a, b)] + ")" if ok else ""))
    return 1 if file_circles or top_circles or bad or unplaced else 0


if __name__ == "__main__":
    sys.exit(main())

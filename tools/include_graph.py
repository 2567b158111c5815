#!/usr/bin/env python3
"""The include graph of framechain, by layer, and the layer rule checked (docs/architecture.md).

    tools/include_graph.py            the layers and which includes which, then the checks
    tools/include_graph.py --files    every file's includes too
    tools/include_graph.py --check    only the checks: PASS/FAIL lines, exit 1 on a failure

The layers, lowest first: a file may include its own layer and those below it, never one above.
src/<layer>/ holds the library, src/*.c the commands; cuda/ is the CUDA backend, a sibling of
src/backend/cpu/ in the backend layer; tests/<layer>/ and tools/ are checked by the same rule.
Inside the backend layer, the contract (backend.h) includes no backend, the two backends
(backend/cpu/ and cuda/) do not include each other, and only the registry knows both.
"""
import os
import re
import sys

LAYERS = ["base", "formats", "video", "backend", "dist", "model", "dataset", "train", "chain", "report", "commands"]
RANK = {name: i for i, name in enumerate(LAYERS)}
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The layer of a repository path, or None for a file outside the layered tree."""
    parts = path.split("/")
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else "commands"
    if parts[0] == "cuda":
        return "backend"
    if parts[0] == "tests":
        if len(parts) > 2 and parts[1] in RANK:
            return parts[1]
        if len(parts) > 2 and parts[1] == "cuda":
            return "model"  # the CUDA backend against the CPU, op by op and on whole network steps
        if len(parts) == 2:
            return "base"  # the harness (check.h)
        return "commands"  # tests/cli, tests/fuzz: may include anything
    if parts[0] == "tools":
        return "commands"
    return None


def side_of(path):
    """Which part of the backend layer a file is: the cpu or cuda backend, the registry, or the rest."""
    if path.startswith("src/backend/cpu/"):
        return "cpu"
    if path.startswith("cuda/"):
        return "cuda"
    if path.startswith("src/backend/registry."):
        return "registry"
    return "contract"


def sources(root):
    for top in ("src", "cuda", "tests", "tools"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def resolve(root, includer, name):
    """Where an include lands: next to the includer, then from src/, the top, tests/."""
    for base in (os.path.dirname(includer), "src", ".", "tests"):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, path)):
            return path
    return None


def build_graph(root):
    graph, problems = {}, []
    for path in sorted(sources(root)):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        graph[path] = []
        for name in INCLUDE.findall(text):
            target = resolve(root, path, name)
            if target is None:
                if not name.startswith(("lib_", "tmpxft")):
                    problems.append(f"{path}: includes \"{name}\", which is not in the tree")
                continue
            graph[path].append((name, target))
    return graph, problems


def layer_problems(graph):
    problems = []
    for path, edges in graph.items():
        la = layer_of(path)
        for name, target in edges:
            lb = layer_of(target)
            if la is None or lb is None:
                continue
            if path.startswith("src/") and target.startswith("src/") and name != os.path.relpath(target, "src"):
                problems.append(f"{path}: #include \"{name}\" does not name its layer "
                                f"(write \"{os.path.relpath(target, 'src')}\")")
            if RANK[lb] > RANK[la]:
                problems.append(f"{path} ({la}) includes {target} ({lb}), a higher layer")
            if la == lb == "backend" and not path.startswith("tests/"):
                sa, sb = side_of(path), side_of(target)
                if sa == "contract" and sb != "contract":
                    problems.append(f"{path}: the contract includes a backend or the registry ({target})")
                if {sa, sb} == {"cpu", "cuda"}:
                    problems.append(f"{path}: one backend includes the other ({target})")
                if sa in ("cpu", "cuda") and sb == "registry":
                    problems.append(f"{path}: a backend includes the registry above it ({target})")
    return problems


def cycles(graph):
    """Include cycles among the files, each as a list of paths."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for _, target in graph.get(node, []):
            if state.get(target) == 1:
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def layer_edges(graph):
    edges = {}
    for path, targets in graph.items():
        la = layer_of(path)
        if la is None or not path.startswith(("src/", "cuda/")):
            continue
        for _, target in targets:
            lb = layer_of(target)
            if lb is not None and lb != la:
                edges.setdefault(la, {}).setdefault(lb, 0)
                edges[la][lb] += 1
    return edges


def main(argv):
    if any(a not in ("--check", "--files") for a in argv) or len(argv) > 1:
        print("usage: tools/include_graph.py [--files | --check]", file=sys.stdout if "--help" in argv else sys.stderr)
        return 0 if argv in (["--help"], ["-h"]) else 2
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    graph, problems = build_graph(root)
    if "--check" not in argv:
        print("layers, lowest first, and the lower layers each includes (number of includes):")
        edges = layer_edges(graph)
        for layer in LAYERS:
            below = ", ".join(f"{lb} ({n})" for lb, n in sorted(edges.get(layer, {}).items(),
                                                               key=lambda kv: RANK[kv[0]]))
            print(f"  {RANK[layer]} {layer:9s} <- {below or '-'}")
        if "--files" in argv:
            for path, targets in graph.items():
                if targets:
                    print(f"{path}: {' '.join(t for _, t in targets)}")
    files = len(graph)
    includes = sum(len(t) for t in graph.values())
    bad = problems + layer_problems(graph)
    loops = cycles(graph)
    for p in bad:
        print(f"  {p}")
    for loop in loops:
        print(f"  cycle: {' -> '.join(loop)}")
    if bad:
        print(f"FAIL include_layers: {len(bad)} includes break the layer rule ({files} files, {includes} includes)")
    else:
        print(f"PASS include_layers: {includes} includes in {files} files, none from a lower layer to a higher one")
    if loops:
        print(f"FAIL include_cycles: {len(loops)} cycles")
    else:
        print(f"PASS include_cycles: no include cycle among {files} files")
    return 1 if bad or loops else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

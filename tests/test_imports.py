"""The package's import graph, read from the source with ast (every import statement, those inside functions too):
no circle between modules, and no import from a lower floor of docs/architecture.md ("Floors") to a higher one."""

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ms_ocr")

# docs/architecture.md "Floors", the ground first: a module stands on the floor of the longest prefix naming it; it
# may import its own floor and those below. A package's `__main__` (its command line) stands on the top floor.
FLOORS = (
    ("ms_ocr", "ms_ocr.errors", "ms_ocr.config_utils", "ms_ocr.proc", "ms_ocr.generate", "ms_ocr.textstream",
     "ms_ocr.stop_rules", "ms_ocr.interfaces", "ms_ocr.processing"),
    ("ms_ocr.ops",),
    ("ms_ocr.convert", "ms_ocr.device", "ms_ocr.compiler", "ms_ocr.compile_cache", "ms_ocr.plan"),
    ("ms_ocr.nn",),
    ("ms_ocr.steps", "ms_ocr.layout"),
    ("ms_ocr.runtime",),
    ("ms_ocr.engine", "ms_ocr.line_reader", "ms_ocr.vlm"),
    ("ms_ocr.models",),
    ("ms_ocr.weights", "ms_ocr.cli"),
    ("ms_ocr.batch", "ms_ocr.pipeline", "ms_ocr.serve", "ms_ocr.export", "ms_ocr.infer", "__main__"),
)


def _modules():
    """{dotted module name: path} of every Python file of the package."""
    out = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return out


def _imports(modules):
    """{module: the package modules it imports}: `from a.b import c` names module a.b.c where there is one, else
    a.b (the nearest enclosing module)."""
    def nearest(name):
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in modules else None

    graph = {}
    for module, path in modules.items():
        package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.Import):
                found |= {nearest(a.name) for a in node.names if a.name.split(".")[0] == "ms_ocr"}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                if base.split(".")[0] == "ms_ocr":
                    found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else nearest(base)
                              for a in node.names}
        graph[module] = found - {None, module}
    return graph


def floor(module):
    """The floor a module stands on (FLOORS' index), -1 for a module no floor names."""
    if module.endswith(".__main__"):
        return len(FLOORS) - 1
    found = [(len(prefix), i) for i, names in enumerate(FLOORS) for prefix in names
             if module == prefix or prefix != "ms_ocr" and module.startswith(prefix + ".")]
    return max(found)[1] if found else -1


def _circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while not part or part[-1] != v:
                part.append(stack.pop())
                on.discard(part[-1])
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert _circles(_imports(_modules())) == []


def test_every_module_stands_on_a_floor():
    assert [module for module in sorted(_modules()) if floor(module) < 0] == []


def test_no_import_from_a_lower_floor_to_a_higher_one():
    graph = _imports(_modules())
    upward = sorted(f"{a} (floor {floor(a)}) -> {b} (floor {floor(b)})" for a, deps in graph.items() for b in deps
                    if floor(b) > floor(a))
    assert upward == []


def test_the_reader_sees_deferred_imports_and_circles():
    """The checks read imports inside functions too (the circles that used to hide there), and find a circle."""
    graph = _imports(_modules())
    assert "ms_ocr.plan" in graph["ms_ocr.models.loading"]
    assert "ms_ocr.layout.loading" in graph["ms_ocr.layout.runner"]  # imported inside LayoutDetector.__init__
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]

"""The package's import graph, read from the source with ast (every import statement, those inside functions too):
no circle between modules, and no import from a lower floor of docs/architecture.md ("Floors") to a higher one."""

import ast
import os
import re

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


# The repository's top-level folders (docs/architecture.md "Folders"): which may import which. bench/ is the code the
# benchmarks (scripts/) and the tests share; scripts/ and training/ never import tests/, nothing imports scripts/
# but scripts/ itself, and the package imports none of them.
REPO = os.path.dirname(ROOT)
TOP_FOLDERS = ("bench", "ms_ocr", "scripts", "tests", "training")
FORBIDDEN = {"bench": {"tests", "scripts"}, "scripts": {"tests"}, "training": {"tests", "scripts"},
             "tests": {"scripts"}, "ms_ocr": {"bench", "scripts", "tests", "training"}}
# scripts/ modules by their bare name (`import benchmark` with scripts/ on sys.path)
_SCRIPT_NAMES = {name[:-3] for name in os.listdir(os.path.join(REPO, "scripts")) if name.endswith(".py")}


def _top_level_imports(path):
    """[(line, first name of every module the file imports)], relative imports resolved to the file's own folder;
    a scripts/ module's bare name counts as scripts (scripts/ put on sys.path), `importlib.import_module("x")` and
    `__import__("x")` with a constant name count as imports of x."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    own = os.path.relpath(path, REPO).split(os.sep)[0]
    found = []

    def add(node, name):
        top = name.split(".")[0]
        found.append((node.lineno, "scripts" if top in _SCRIPT_NAMES and own != "scripts" else top))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            add(node, own if node.level else node.module or "")
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                   or isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module"))):
            add(node, node.args[0].value)
    return found


def _scripts_on_sys_path(path):
    """Lines of `sys.path.insert/append(...)` or `syspath_prepend(...)` whose argument names the scripts folder (a
    string or a variable with "scripts" in it)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("insert", "append", "syspath_prepend")
                and (node.func.attr == "syspath_prepend" or ast.unparse(node.func.value) == "sys.path")):
            if any("scripts" in ast.unparse(arg) for arg in node.args):  # a string or a variable naming it
                lines.append(node.lineno)
    return lines


# Python code in a string (what `python -c` runs in a child process) that imports tests/: "from tests.x import y",
# "from tests import x", "import tests" or "import tests.x" (not prose as "never import tests/").
_TESTS_IMPORT_CODE = re.compile(r"\bfrom\s+tests(\.\w|\s+import\b)|\bimport\s+tests(\.\w|\s+as\b|\s*(,|;|$))", re.M)


def _tests_imports_in_strings(path):
    """Lines of string literals (f-strings' constant parts too) holding code that imports tests/: a hidden import
    when the string goes to `python -c` (as bench/run.py's checkpoint builder once ran tests/helpers' builders)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    return sorted({node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant)
                   and isinstance(node.value, str) and _TESTS_IMPORT_CODE.search(node.value)})


def _python_files(folder):
    for base, dirs, files in os.walk(os.path.join(REPO, folder)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        yield from (os.path.join(base, name) for name in sorted(files) if name.endswith(".py"))


def test_top_level_folders_import_only_what_they_may():
    """scripts/, training/ and bench/ import nothing from tests/ (nor run code that does, in a string for `python -c`);
    tests/, bench/ and training/ nothing from scripts/ (nor put scripts/ on sys.path); ms_ocr none of bench/, scripts/,
    tests/, training/."""
    wrong = []
    for folder, banned in FORBIDDEN.items():
        for path in _python_files(folder):
            rel = os.path.relpath(path, REPO)
            wrong += [f"{rel}:{line} imports {top}" for line, top in _top_level_imports(path) if top in banned]
            if "scripts" in banned:
                wrong += [f"{rel}:{line} puts scripts/ on sys.path" for line in _scripts_on_sys_path(path)]
            if "tests" in banned:
                wrong += [f"{rel}:{line} runs code importing tests (a string)"
                          for line in _tests_imports_in_strings(path)]
    assert wrong == []


def test_the_folder_check_sees_bare_script_names_and_sys_path_tricks(tmp_path):
    """A test that puts scripts/ on sys.path and imports `benchmark` (or through importlib) is caught."""
    sample = tmp_path / "sample.py"
    sample.write_text("import importlib, os, sys\n"
                      "sys.path.insert(0, os.path.join(ROOT, 'scripts'))\n"
                      "def f(monkeypatch):\n"
                      "    scripts = os.path.join(ROOT, 'scripts')\n"
                      "    monkeypatch.syspath_prepend(scripts)\n"
                      "    import benchmark\n"
                      "    return importlib.import_module('benchmark_batch')\n")
    tops = [top for _, top in _top_level_imports(str(sample))]
    assert tops.count("scripts") == 2
    assert _scripts_on_sys_path(str(sample)) == [2, 5]


def test_the_folder_check_sees_tests_imports_in_code_strings(tmp_path):
    """Code importing tests/ passed to `python -c` (a plain string or an f-string) is caught; prose naming tests/ and
    modules whose name only starts with "tests" are not."""
    sample = tmp_path / "sample.py"
    sample.write_text("import subprocess, sys\n"
                      "def build(model, out):\n"
                      "    code = f\"from tests.helpers.real_size import BUILDERS; BUILDERS[{model!r}]({out!r})\"\n"
                      "    subprocess.run([sys.executable, '-c', code], check=True)\n"
                      "    subprocess.run([sys.executable, '-c', 'import tests.helpers.fonts'])\n"
                      "    subprocess.run([sys.executable, '-c', 'import os; from tests import conftest'])\n"
                      "    subprocess.run([sys.executable, '-c', 'import testsuite; from tests_extra.x import y'])\n"
                      "    return 'bench/ and scripts/ never import tests/; the tests of tests/helpers'\n")
    assert _tests_imports_in_strings(str(sample)) == [3, 5, 6]
    assert [top for _, top in _top_level_imports(str(sample))] == ["subprocess", "sys"]  # no import statement

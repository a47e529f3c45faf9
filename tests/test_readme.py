"""The documents' command lines use options their programs accept; the documents keep their sizes; every
MS_OCR_* environment variable is documented.

Every command shown in README.md, the guides in docs/ and the model READMEs — `python -m ms_ocr.X ...`, `./ocr.sh
[sub] ...` (the subcommand's module is read from ocr.sh itself), `python scripts/X.py ...`, `msrun ... scripts/X.py
...` — is split into tokens; every `--flag` after the program must be an option of that program's argparse parser
(taken from the module's build_parser(), or captured from its main() at parse time, without running it), and a
literal value given to an option with choices must be one of them. Every `--flag` elsewhere in README.md must be an
option of some ms_ocr program or of the external tools the README shows (msrun, huggingface-cli). The journal
(docs/journal/) is left out: it records the commands as they were run on its dates.
README.md stays within 200 lines and each guide in docs/ within 300 (dated measurements go to the journal). Every
MS_OCR_* name the code reads or mentions (ms_ocr/, scripts/, tests/, training/, the launchers) has a row in the
environment-variable table of docs/usage.md, and every row names one the code uses.
Nothing heavy is imported (no MindSpore), so the whole file runs in about a second.
"""

import argparse
import glob
import importlib
import importlib.util
import os
import re
import runpy
import shlex
import sys
from unittest import mock

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Options of external tools shown in README.md (msrun's launcher flags, huggingface-cli's download flags).
EXTERNAL_FLAGS = {"--worker_num", "--local_worker_num", "--master_port", "--join", "--local-dir", "--include"}

PROGRAM = re.compile(r"(?:python3?\s+-m\s+(?P<module>ms_ocr(?:\.\w+)*)"
                     r"|(?:python3?\s+|msrun\b[^`\n]*?\s)(?P<script>scripts/\w+\.py)"
                     r"|(?P<ocrsh>\./ocr\.sh))")
FLAG = re.compile(r"(?<![\w-])(--[a-zA-Z][\w-]*)")
PLACEHOLDER = re.compile(r"^[A-Z0-9_.\-*<>/\[\]]+$|[<>{}$]")  # DIR, OUT.png, N, <model>: not a literal value


README_LINES = 200
GUIDE_LINES = 300
ENV_TABLE = os.path.join(REPO, "docs", "usage.md")  # its "Environment variables" table
ENV_NAME = re.compile(r"\bMS_OCR_[A-Z0-9_]*[A-Z0-9]")


def guide_files():
    """docs/*.md: the guides (the journal in docs/journal/ is not one)."""
    return sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


def doc_files():
    files = [os.path.join(REPO, "README.md")] + guide_files()
    files += sorted(glob.glob(os.path.join(REPO, "ms_ocr", "**", "README.md"), recursive=True))
    return [f for f in files if os.path.exists(f)]


def ocr_sh_modules(path=os.path.join(REPO, "ocr.sh")):
    """{subcommand or None: module} as ocr.sh dispatches them."""
    text = open(path, encoding="utf-8").read()
    default = re.search(r"^module=(ms_ocr[\w.]*)", text, re.M)
    assert default, "ocr.sh sets no default module"
    table = {None: default.group(1)}
    for sub, module in re.findall(r"^\s*([\w-]+)\)\s*module=(ms_ocr[\w.]*)", text, re.M):
        table[sub] = module
    return table


class _Captured(BaseException):  # BaseException: the CLIs' "any error is one line" wrappers must not catch it
    def __init__(self, parser):
        super().__init__()
        self.parser = parser


def _capture(run, what):
    """The parser run() builds, taken at its parse_args call (nothing after it runs)."""
    def grab(self, *args, **kwargs):
        raise _Captured(self)
    with mock.patch.object(argparse.ArgumentParser, "parse_args", grab), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", grab), \
            mock.patch.object(sys, "argv", ["prog"]):
        try:
            run()
        except _Captured as c:
            return c.parser
    raise AssertionError(f"{what} returned without parsing arguments")


def _parser_of_module(mod, path=None):
    if callable(getattr(mod, "build_parser", None)):
        return mod.build_parser()
    main = getattr(mod, "main", None)
    if main is None and path is not None:  # a script that parses under `if __name__ == "__main__"` only
        return _capture(lambda: runpy.run_path(path, run_name="__main__"), path)
    assert callable(main), f"{mod.__name__} has neither build_parser() nor main()"
    home = sys.modules.get(main.__module__)
    if home is not None and home is not mod and callable(getattr(home, "build_parser", None)):
        return home.build_parser()  # e.g. scripts/batch_infer.py runs ms_ocr.batch.cli's main
    return _capture(main, f"{main.__module__}.main()")


_parsers = {}


def parser_for(program):
    """argparse parser of 'ms_ocr.X' (a module, or a package's cli/__main__) or 'scripts/X.py'."""
    if program not in _parsers:
        _parsers[program] = _script_parser(program) if program.startswith("scripts/") else _module_parser(program)
    return _parsers[program]


def _script_parser(program):
    path = os.path.join(REPO, program)
    assert os.path.exists(path), f"{program} does not exist"
    spec = importlib.util.spec_from_file_location("_readme_" + os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # scripts keep their work under `if __name__ == "__main__"`
    return _parser_of_module(mod, path)


def _module_parser(program):
    spec = importlib.util.find_spec(program)
    assert spec is not None, f"module {program} does not exist"
    if spec.submodule_search_locations is None:
        return _parser_of_module(importlib.import_module(program))
    # a package run by `python -m`: its cli module, else its __main__ if that does not run on import
    found = [m for m in (program + ".cli", program + ".__main__") if importlib.util.find_spec(m) is not None]
    assert found, f"package {program} has no cli or __main__ module"
    if found[0].endswith(".__main__"):
        source = open(importlib.util.find_spec(found[0]).origin, encoding="utf-8").read()
        assert "__name__" in source, f"{found[0]} runs on import; give it a build_parser() in a cli module"
    return _parser_of_module(importlib.import_module(found[0]))


def _join_continuations(text):
    return re.sub(r"\\\n\s*", " ", text)


def commands(text, ocr_sh=None):
    """[(line number, program, tokens after it)] for every command line in a Markdown text."""
    ocr_sh = ocr_sh or ocr_sh_modules()
    out = []
    for n, line in enumerate(_join_continuations(text).splitlines(), 1):
        for m in PROGRAM.finditer(line):
            rest = line[m.end():]
            start = m.start()
            if line.count("`", 0, start) % 2:  # inside an inline code span: the command ends at its closing tick
                rest = rest.split("`", 1)[0]
            rest = re.split(r"\s(?:\||&&|;|#|>)\s|`", rest)[0]
            try:
                tokens = shlex.split(rest)
            except ValueError:
                tokens = rest.split()
            if m.group("module"):
                program = m.group("module")
            elif m.group("script"):
                program = m.group("script")
            else:
                sub = tokens[0] if tokens and not tokens[0].startswith("-") else None
                assert sub in ocr_sh, f"line {n}: ./ocr.sh has no subcommand {sub!r} ({sorted(k for k in ocr_sh if k)})"
                program = ocr_sh[sub]
                tokens = tokens[1:] if sub else tokens
            out.append((n, program, tokens))
    return out


def _flag_of(token):
    token = token.lstrip("[(")
    if not token.startswith("--") or len(token) < 3:
        return None
    return re.match(r"--[\w-]+", token).group(0)


def check_command(program, tokens):
    """Problems (strings) with one command's options."""
    parser = parser_for(program)
    actions = parser._option_string_actions
    problems = []
    for i, token in enumerate(tokens):
        flag = _flag_of(token)
        if flag is None:
            continue
        action = actions.get(flag)
        if action is None:
            problems.append(f"{program} has no option {flag}")
            continue
        if not action.choices:
            continue
        values = [token.split("=", 1)[1]] if "=" in token else []
        if not values:
            for value in tokens[i + 1:]:
                if value.startswith("-") or value.startswith("["):
                    break
                values.append(value.rstrip("])"))
                if action.nargs not in ("+", "*"):
                    break
        for value in values:
            for v in value.split("|"):
                if v and not PLACEHOLDER.search(v) and v not in action.choices:
                    problems.append(f"{program} {flag}: {v!r} is not one of {sorted(action.choices)}")
    return problems


def check_file(path):
    text = open(path, encoding="utf-8").read()
    problems = []
    for n, program, tokens in commands(text):
        problems += [f"{os.path.relpath(path, REPO)}:{n}: {p}" for p in check_command(program, tokens)]
    return problems


def all_known_flags():
    programs = ["ms_ocr.infer", "ms_ocr.batch", "ms_ocr.pipeline", "ms_ocr.serve", "ms_ocr.convert", "ms_ocr.export"]
    for path in sorted(glob.glob(os.path.join(REPO, "scripts", "*.py"))):
        source = open(path, encoding="utf-8").read()
        if "ArgumentParser" in source or "import main" in source:  # the scripts that are programs
            programs.append("scripts/" + os.path.basename(path))
    flags = set(EXTERNAL_FLAGS) | {"--help"}
    for program in programs:
        flags |= set(parser_for(program)._option_string_actions)
    return flags


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: os.path.relpath(p, REPO))
def test_documented_commands_use_existing_options(path):
    assert check_file(path) == []


def test_readme_shows_every_program():
    found = {program for _, program, _ in commands(open(os.path.join(REPO, "README.md"), encoding="utf-8").read())}
    for program in ("ms_ocr.infer", "ms_ocr.batch", "ms_ocr.pipeline", "ms_ocr.serve", "ms_ocr.convert",
                    "ms_ocr.export", "scripts/benchmark.py"):
        assert program in found, f"README.md shows no {program} command"


def test_every_flag_in_the_readme_exists_somewhere():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    known = all_known_flags()
    unknown = sorted({f for f in FLAG.findall(text) if f not in known})
    assert unknown == []


def test_the_check_catches_a_wrong_option_and_a_wrong_choice():
    text = ("Run:\n\n    python -m ms_ocr.infer --model paddleocr-vl --image a.png --no-such-flag\n"
            "    ./ocr.sh pipeline --image page.png --layout-mode sideways --out out/\n"
            "    python -m ms_ocr.export --model x --out e/ \\\n        --slot 7\n"
            "and `python -m ms_ocr.batch --input d/ --out o/ --dtype auto|fp64` inline.\n")
    problems = [p for _, program, tokens in commands(text) for p in check_command(program, tokens)]
    assert problems == ["ms_ocr.infer has no option --no-such-flag",
                        "ms_ocr.pipeline --layout-mode: 'sideways' is not one of ['auto', 'eager', 'graph']",
                        "ms_ocr.export has no option --slot",
                        "ms_ocr.batch --dtype: 'fp64' is not one of ['auto', 'bf16', 'fp16', 'fp32']"]


def test_ocr_sh_subcommands_map_to_modules():
    table = ocr_sh_modules()
    assert table[None] == "ms_ocr.infer"
    assert {"pipeline", "batch", "serve"} <= set(table)
    for module in table.values():
        assert importlib.util.find_spec(module) is not None


def test_readme_and_guides_stay_short():
    lines = {os.path.relpath(path, REPO): len(open(path, encoding="utf-8").read().splitlines())
             for path in [os.path.join(REPO, "README.md")] + guide_files()}
    assert lines["README.md"] <= README_LINES, f"README.md has {lines['README.md']} lines"
    long = {name: n for name, n in lines.items() if name != "README.md" and n > GUIDE_LINES}
    assert long == {}, f"guides over {GUIDE_LINES} lines (dated measurements go to docs/journal/): {long}"


def env_names_in_code():
    """{MS_OCR_* name: first file naming it} over the Python and shell sources and the launchers."""
    paths = [os.path.join(REPO, name) for name in ("ocr.sh", "run_tests.sh", "setup.py")]
    for folder in ("ms_ocr", "scripts", "tests", "training"):
        for ext in ("py", "sh"):
            paths += glob.glob(os.path.join(REPO, folder, "**", "*." + ext), recursive=True)
    found = {}
    for path in sorted(paths):
        for name in ENV_NAME.findall(open(path, encoding="utf-8").read()):
            found.setdefault(name, os.path.relpath(path, REPO))
    return found


def env_names_documented(path=ENV_TABLE):
    """The names in the first column of the environment-variable table."""
    return set(re.findall(r"^\| `(MS_OCR_[A-Z0-9_]+)` \|", open(path, encoding="utf-8").read(), re.M))


def test_every_environment_variable_is_documented_in_one_table():
    used, documented = env_names_in_code(), env_names_documented()
    missing = {name: where for name, where in used.items() if name not in documented}
    assert missing == {}, f"MS_OCR_* names without a row in {os.path.relpath(ENV_TABLE, REPO)}: {missing}"
    assert documented - set(used) == set(), "rows for names no code uses"
    assert {"MS_OCR_HOME", "MS_OCR_OFFLINE", "MS_OCR_STAGED", "MS_OCR_DEBUG"} <= documented  # the check finds rows

"""Names in outputs: file names that are not valid UTF-8 kept exact in JSON, shown safely on a terminal, and
turned into output file names that are safe (valid UTF-8, no separators, no leading dot) and unique.

Python reads a name that is not valid UTF-8 with each undecodable byte as a lone surrogate (U+DC80..U+DCFF,
PEP 383). Such a string cannot be written as UTF-8, which is what stopped a batch at that file."""

import hashlib
import json
import os
import re

_SURROGATE = re.compile("[\ud800-\udfff]")
_SAFE = "._- #@"  # kept as they are in output file names, with letters and digits
_MAX_BYTES = 200  # an encoded name plus its extension stays under NAME_MAX (255 bytes)


def to_json(obj, **kwargs):
    """json.dumps with text kept readable (ensure_ascii=False) except lone surrogates, written as \\udcXX
    escapes: the line is valid UTF-8 and json.loads gives back the same string (os.fsencode: the same bytes)."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(obj, ensure_ascii=False, **kwargs))


def display(name):
    """A name for a terminal or a log: undecodable bytes shown as \\xNN (as `ls -b` does)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace") if _SURROGATE.search(name) else name


def _encode_char(c):
    if (c.isalnum() and c.isprintable() and not _SURROGATE.match(c)) or c in _SAFE:
        return c
    if c == os.sep:
        return "+"
    return "".join(f"~{b:02X}" for b in os.fsencode(c))


def path_name(path):
    """A file name for `path` (absolute, without its leading separator) that no other path gets: separators
    become `+`, anything but letters, digits and `._- #@` becomes `~XX` per byte (so `+` and `~` never appear
    literally), a leading dot `~2E`. `a/x/y.png` -> `...+a+x+y.png`, `a/x_y.png` -> `...+a+x_y.png`. Names
    too long for the file system keep their end behind a hash of the whole name."""
    text = os.path.abspath(path).lstrip(os.sep)
    name = "".join(_encode_char(c) for c in text) or "~2F"
    if name.startswith("."):
        name = "~2E" + name[1:]
    if len(name.encode("utf-8")) > _MAX_BYTES:
        digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:16]
        tail = name.encode("utf-8")[-(_MAX_BYTES - 20):].decode("utf-8", "ignore")
        name = f"~h{digest}~{tail}"  # "~h" is never produced by the encoding above: still unique
    return name


def stem_name(path):
    """A short, safe output stem for a file: its base name without the extension, undecodable bytes as %XX,
    separators and control characters as `_`, no leading dot. Not unique by itself: see claim_name."""
    stem = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
    out = []
    for c in stem:
        if _SURROGATE.match(c):
            out.append("".join(f"%{b:02X}" for b in os.fsencode(c)))
        elif c in "/\\" or not c.isprintable():
            out.append("_")
        else:
            out.append(c)
    name = "".join(out).lstrip(".") or "page"
    encoded = name.encode("utf-8")
    if len(encoded) > _MAX_BYTES:
        name = encoded[:_MAX_BYTES].decode("utf-8", "ignore") + "-" + hashlib.sha1(encoded).hexdigest()[:8]
    return name

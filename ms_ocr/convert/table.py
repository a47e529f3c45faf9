"""Declarative rename tables: ordered regex renames (most specific first) and keys to drop."""

import re


class RenameTable:
    def __init__(self, renames=(), drops=()):
        self.renames = [(re.compile(p), r) for p, r in renames]
        self.drops = [re.compile(p) for p in drops]

    def __call__(self, name):
        """Local parameter name for a checkpoint key, or None when the key is dropped."""
        if any(p.search(name) for p in self.drops):
            return None
        for pattern, repl in self.renames:
            new, n = pattern.subn(repl, name)
            if n:
                return new
        return name

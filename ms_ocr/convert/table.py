"""Declarative rename tables: ordered regex renames (most specific first) and keys to drop."""

import re


class RenameTable:
    """chain=False: the first matching rename applies; chain=True: every matching rename, in order."""

    def __init__(self, renames=(), drops=(), chain=False):
        self.renames = [(re.compile(p), r) for p, r in renames]
        self.drops = [re.compile(p) for p in drops]
        self.chain = chain

    def __call__(self, name):
        """Local parameter name for a checkpoint key, or None when the key is dropped."""
        if any(p.search(name) for p in self.drops):
            return None
        for pattern, repl in self.renames:
            new, n = pattern.subn(repl, name)
            if n and not self.chain:
                return new
            name = new
        return name

"""Module-scoped fits made when a test first reads them."""

from __future__ import annotations


class Fits(dict):
    """A file's fits by name, each made when a test first asks for it (a test run
    alone, as in its default-emitters subprocess, makes only the fits it reads).

    ``makers`` maps each name to a function returning a dict of the entries it makes
    (one fit may make several: the trainer, its callbacks' records)."""

    def __init__(self, makers):
        super().__init__()
        self._makers = makers

    def __missing__(self, name):
        self.update(self._makers[name]())
        return self[name]

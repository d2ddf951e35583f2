"""Compiled-code cache for Ansible's module payloads, installed on the lab's head VM only.

Every Ansible task on a host runs its module as a zip (AnsiballZ) imported with Python's
``zipimport``, which cannot keep compiled bytecode: each task compiles ``ansible.module_utils``
from source again, and Python 3.11's zipimporter (a legacy loader) compiles each module twice,
once to name its file (``get_filename``, asked for by the import spec) and once to run it.
Under software emulation that is about a second of the head's CPU per task, and the lab runs
some hundreds of tasks on the head.

This importer is the standard zipimporter for the payload zips of Ansible (``ansible_*_payload``
archives) with three changes: the file name of a module is read from the archive's table of
contents without compiling it, a module is compiled once per import, and the compiled code is
kept in ``CACHE`` keyed by the SHA-256 of its path inside the archive and its source, so that the
next task with the same source loads it (with its code objects' file names set to this run's
archive).  A different source is a different key: nothing stale can run.  Other zips, other
Pythons and anything it does not expect fall back to the standard importer.

Installed by lab/build-head.sh as a ``.pth`` hook in the head's ``dist-packages``; the product
and the node images never carry it.  ``bench/lab_head_modules.py`` measures it.
"""

from __future__ import annotations

import sys
import zipimport

CACHE = "/var/cache/jylab-zipcache"
# the archives AnsiballZ writes:
# <tmp>/ansible_<module>_payload_<random>/ansible_<module>_payload.zip
MARKER = "_payload.zip"
# zipimport's own search order: (suffix, is bytecode, is package)
_ORDER = (("/__init__.pyc", True, True), ("/__init__.py", False, True),
          (".pyc", True, False), (".py", False, False))


def _refile(code, filename: str):
    """code with co_filename set to filename, in it and in every code object it holds."""
    consts = tuple(_refile(c, filename) if isinstance(c, type(code)) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


class CachingZipImporter(zipimport.zipimporter):
    """zipimporter that compiles once and keeps the compiled code (see the module docstring)."""

    def _entry(self, fullname: str):
        """(path inside the archive, path for __file__, is package) of the module's source,
        or None when the archive holds bytecode for it or nothing (the standard path)."""
        base = self.prefix + fullname.rpartition(".")[2]
        files = getattr(self, "_files", None)  # zipimport's table of contents (private)
        if not isinstance(files, dict):
            return None
        for suffix, bytecode, package in _ORDER:
            toc = files.get(base + suffix)
            if toc is not None:
                return None if bytecode else (base + suffix, toc[0], package)
        return None

    def get_filename(self, fullname):
        entry = self._entry(fullname)
        return entry[1] if entry else super().get_filename(fullname)

    def get_code(self, fullname):
        entry = self._entry(fullname)
        if entry is None:
            return super().get_code(fullname)
        inner, modpath = entry[0], entry[1]
        source = self.get_data(inner)
        # imported only once a payload is imported, not at every start of Python
        import hashlib
        import marshal
        import os
        key = hashlib.sha256(inner.encode() + b"\0" + source).hexdigest()
        path = os.path.join(CACHE, f"{key}.{sys.implementation.cache_tag}")
        try:
            with open(path, "rb") as f:
                code = marshal.load(f)
        except (OSError, EOFError, ValueError, TypeError):
            code = compile(source, modpath, "exec", dont_inherit=True)
            try:
                tmp = f"{path}.{os.getpid()}"
                with open(tmp, "wb") as f:
                    marshal.dump(code, f)
                os.replace(tmp, path)
            except OSError:
                pass  # no cache directory (or no room): this run compiled; the next does too
            return code
        return _refile(code, modpath)

    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)  # what an importer does

    def create_module(self, spec):
        return None  # the default module


def _hook(path: str):
    # the archive itself, or a package in it (<archive>/ansible/module_utils)
    if not (path.endswith(MARKER) or MARKER + "/" in path):
        raise ImportError("not an Ansible payload")
    return CachingZipImporter(path)


def install() -> None:
    """Put the hook in front of the standard zipimporter (once)."""
    if _hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _hook)

"""The lab head's compiled-code cache for Ansible's module payloads (lab/jylab/zipcache.py),
with this Python's own zipimport: each case runs a fresh interpreter that installs the hook,
imports from a payload-named zip and reports what it got and how often it compiled."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import builtins, json, sys
sys.path.insert(0, {lab!r})
from jylab import zipcache
zipcache.CACHE = {cache!r}
compiled = []
real_compile = builtins.compile
def counting(source, filename, *args, **kwargs):
    compiled.append(str(filename))
    return real_compile(source, filename, *args, **kwargs)
builtins.compile = counting
zipcache.install()
sys.path.insert(0, {archive!r})
import pkg.sub.mod as mod
try:
    mod.fail()
except RuntimeError as exc:
    where = exc.__traceback__.tb_next.tb_frame.f_code.co_filename
print(json.dumps({{"value": mod.VALUE, "file": mod.__file__, "traceback_file": where,
                   "inner": mod.inner_file(),
                   "loader": type(mod.__loader__).__name__,
                   "compiled": [c for c in compiled if {archive!r} in c]}}))
"""


def payload(tmp: Path, run: str, value: int, name: str = "ansible_probe_payload.zip") -> Path:
    archive = tmp / run / name
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/sub/__init__.py", "")
        z.writestr("pkg/sub/mod.py", (
            f"VALUE = {value}\n"
            "def fail():\n    raise RuntimeError('boom')\n"
            "def inner_file():\n    return (lambda: 0).__code__.co_filename\n"))
    return archive


def probe(archive: Path, cache: Path) -> dict:
    code = PROBE.format(lab=str(REPO / "lab"), cache=str(cache), archive=str(archive))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_second_task_loads_the_compiled_code_with_its_own_file_names(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    first = probe(payload(tmp_path, "run1", 1), cache)
    assert first["loader"] == "CachingZipImporter", first
    assert first["value"] == 1
    # each module compiled once (Python 3.11's zipimporter compiles twice per module)
    compiled = sorted(Path(c).name for c in first["compiled"])
    assert compiled == ["__init__.py", "__init__.py", "mod.py"], first
    assert len(list(cache.iterdir())) == 3

    second_archive = payload(tmp_path, "run2", 1)
    second = probe(second_archive, cache)
    assert second["value"] == 1 and second["compiled"] == [], second
    # file names are this run's archive, in the module and in the code inside it
    expected = f"{second_archive}/pkg/sub/mod.py"
    assert second["file"] == expected, second
    assert second["traceback_file"] == expected and second["inner"] == expected, second


def test_a_changed_source_is_compiled_again_never_served_stale(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    assert probe(payload(tmp_path, "run1", 1), cache)["value"] == 1
    changed = probe(payload(tmp_path, "run2", 2), cache)
    assert changed["value"] == 2, changed
    assert [Path(c).name for c in changed["compiled"]] == ["mod.py"], changed


def test_other_zips_keep_the_standard_importer(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    other = probe(payload(tmp_path, "run1", 3, name="library.zip"), cache)
    assert other["value"] == 3 and other["loader"] == "zipimporter", other
    assert list(cache.iterdir()) == []


def test_without_a_cache_directory_it_still_imports(tmp_path):
    res = probe(payload(tmp_path, "run1", 4), tmp_path / "missing")
    assert res["value"] == 4 and res["loader"] == "CachingZipImporter", res

"""The layers of the source tree (README "Source layout") hold: each convenience library is
compiled with the include paths of the layers below it only (Makefile.am), which works only
while headers are included by bare name. A quoted include with a directory in it would reach
any layer and bypass that check, so none may exist."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = sorted(p for d in ("src", "formats", "cache", "fuse", "tests/unit")
                 for p in (ROOT / d).rglob("*.[ch]"))
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def test_sources_found():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_includes_are_bare_names(path):
    with_dirs = [h for h in QUOTED_INCLUDE.findall(path.read_text()) if "/" in h]
    assert with_dirs == [], f"{path.relative_to(ROOT)} includes {with_dirs}: include by bare name " \
                            "and give the layer the include path in Makefile.am, if it may use it"


def test_only_the_command_line_and_fuse_include_fuse_headers():
    fuse_headers = {p.name for p in (ROOT / "fuse").glob("*.h")}
    for path in SOURCES:
        rel = path.relative_to(ROOT).parts
        if rel[0] == "fuse" or rel[:2] == ("src", "cli") or rel[:2] == ("tests", "unit"):
            continue
        used = set(QUOTED_INCLUDE.findall(path.read_text())) & fuse_headers
        assert not used, f"{'/'.join(rel)} includes {used}"


def _headers(*dirs):
    return {p.name for d in dirs for p in (ROOT / d).glob("*.h")}


def test_isolate_sits_between_formats_and_catalog():
    """src/isolate uses base, model and formats/format.h only; nothing below it uses it."""
    isolate = _headers("src/isolate")
    allowed = isolate | _headers("src/base", "src/model") | {"format.h", "probe.h", "config.h"}
    for path in sorted((ROOT / "src/isolate").glob("*.[ch]")):
        used = set(QUOTED_INCLUDE.findall(path.read_text())) - allowed
        assert not used, f"src/isolate/{path.name} includes {used}"
    below = [p for d in ("src/base", "src/model", "src/layout", "src/store", "formats", "cache")
             for p in (ROOT / d).rglob("*.[ch]")]
    for path in below:
        used = set(QUOTED_INCLUDE.findall(path.read_text())) & isolate
        assert not used, f"{path.relative_to(ROOT)} includes {used}"


def test_net_uses_base_only():
    """src/net (HTTP and S3 over libcurl) knows nothing of datasets: base headers only."""
    allowed = _headers("src/net", "src/base") | {"config.h"}
    for path in sorted((ROOT / "src/net").glob("*.[ch]")):
        used = set(QUOTED_INCLUDE.findall(path.read_text())) - allowed
        assert not used, f"src/net/{path.name} includes {used}"

"""The Python documentation and the package agree: every name the docs' code blocks use exists, and
every public method of Communicator and name of the package is documented in py/README.md.

The code blocks (```...```) of py/README.md, README.md and docs/getting-started.md are read for
`comm.<name>` (a Communicator attribute), `req.<name>` (a Request attribute) and `peerlink.<a>.<b>...`
(an attribute chain of the package, or one of its submodules)."""
import importlib.util
import re
from pathlib import Path

import pytest

import peerlink

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "py" / "README.md", REPO / "README.md", REPO / "docs" / "getting-started.md"]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
COMM = re.compile(r"(?<![\w.])comm\.(\w+)")
REQ = re.compile(r"(?<![\w.])req\.(\w+)")
PKG = re.compile(r"(?<![\w./])peerlink((?:\.\w+)+)")


def code_blocks(text: str):
    return FENCE.findall(text)


def names_in(text: str):
    """(kind, name) pairs of the code blocks: ("comm", "send"), ("req", "wait"),
    ("peerlink", "Communicator.from_env"), ..."""
    found = set()
    for block in code_blocks(text):
        found.update(("comm", n) for n in COMM.findall(block))
        found.update(("req", n) for n in REQ.findall(block))
        found.update(("peerlink", chain.lstrip(".")) for chain in PKG.findall(block))
    return found


def resolves(kind: str, name: str) -> bool:
    if kind == "comm":
        return hasattr(peerlink.Communicator, name)
    if kind == "req":
        return hasattr(peerlink.Request, name)
    obj, path = peerlink, "peerlink"
    for part in name.split("."):
        path += "." + part
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif importlib.util.find_spec(path) is not None:  # a submodule (peerlink.launch, ...)
            obj = importlib.import_module(path)
        else:
            return False
    return True


def doc_text(path: Path) -> str:
    if not path.is_file():
        pytest.skip(f"{path} is not here (the package was installed without the repository)")
    return path.read_text()


TORCH_IMPORTABLE = importlib.util.find_spec("torch") is not None


def needs_absent_torch(kind: str, name: str) -> bool:
    """peerlink.torch imports torch; without torch its names cannot be resolved here (test_torch_cpu.py
    checks them where torch is installed)."""
    return not TORCH_IMPORTABLE and kind == "peerlink" and name.split(".")[0] == "torch"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_documented_name_exists(doc):
    names = {(k, n) for k, n in names_in(doc_text(doc)) if not needs_absent_torch(k, n)}
    assert names, f"{doc}: no comm./req./peerlink. names in its code blocks"
    missing = sorted(f"{k}.{n}" for k, n in names if not resolves(k, n))
    assert not missing, f"{doc.name} documents names the package does not have: {missing}"


def test_every_public_name_is_documented():
    names = names_in(doc_text(REPO / "py" / "README.md"))
    comm_doc = {n for k, n in names if k == "comm"} | {
        n.split(".")[1] for k, n in names if k == "peerlink" and n.startswith("Communicator.")}
    public = {n for n in vars(peerlink.Communicator) if not n.startswith("_")}
    for base in peerlink.Communicator.__mro__[1:]:
        if base.__module__.startswith("peerlink"):
            public |= {n for n in vars(base) if not n.startswith("_")}
    undocumented = sorted(public - comm_doc)
    assert not undocumented, f"Communicator members missing from py/README.md's code blocks: {undocumented}"
    pkg_doc = {n.split(".")[0] for k, n in names if k == "peerlink"}
    undocumented = sorted(set(peerlink.__all__) - pkg_doc)
    assert not undocumented, f"peerlink names missing from py/README.md's code blocks: {undocumented}"
    req_doc = {n for k, n in names if k == "req"}
    undocumented = sorted({n for n in dir(peerlink.Request) if not n.startswith("_")} - req_doc)
    assert not undocumented, f"Request members missing from py/README.md's code blocks: {undocumented}"


def test_the_check_catches_a_wrong_name():
    text = "```python\ncomm.send_direct(peer, t, 1)\ncomm.no_such_call(1)\nreq.wait()\n" \
           "peerlink.Communicator.from_env()\npeerlink.launch.launch\npeerlink.NoSuchName\n```\n" \
           "comm.outside_a_code_block()\n"
    names = names_in(text)
    assert ("comm", "outside_a_code_block") not in names
    bad = sorted(f"{k}.{n}" for k, n in names if not resolves(k, n))
    assert bad == ["comm.no_such_call", "peerlink.NoSuchName"]

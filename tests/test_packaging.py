"""pyproject.toml declares what the code imports."""

import ast
import re
import sys
import tomllib

from conftest import ROOT

from modeling_pointer_sentinel import checkpointing

FOLDERS = ("modeling_pointer_sentinel", "examples", "tests", "benchmarks")
LOCAL = {"modeling_pointer_sentinel"} | {p.stem for f in FOLDERS for p in (ROOT / f).glob("*.py")}  # sibling modules
DISTRIBUTION = {"huggingface_hub": "huggingface-hub"}  # import name -> distribution name where they differ


def declared() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Distribution names per group ("" = required), and the raw requirement strings."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"": project["dependencies"], **project["optional-dependencies"]}
    norm = lambda req: re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower().replace("_", "-")  # noqa: E731
    return {group: [norm(r) for r in reqs] for group, reqs in groups.items()}, groups


def imported(folder: str) -> set[str]:
    names = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return {n for n in names - LOCAL if n not in sys.stdlib_module_names}


def test_every_directly_imported_package_is_declared():
    names, _ = declared()
    required, optional = set(names[""]), {n for group, ns in names.items() if group for n in ns}
    dist = lambda module: DISTRIBUTION.get(module, module).lower().replace("_", "-")  # noqa: E731
    missing = sorted(m for m in imported("modeling_pointer_sentinel") | imported("examples")
                     if dist(m) not in required and m != "matplotlib")  # fmt: skip
    # examples/lm_eval_wikitext.py, examples/export_onnx.py and examples/onnx_generate.py need their extras
    optional_examples = {"lm_eval": "lm-eval", "onnx": "onnx", "onnxruntime": "onnx", "onnxscript": "onnx",
                         "numpy": "onnx", "gradio": "demo"}  # fmt: skip
    missing = sorted(m for m in missing if not (m in optional_examples and dist(m) in names[optional_examples[m]]))
    assert missing == [], f"imported by the package or the examples but not in dependencies: {missing}"
    assert "matplotlib" in names["analysis"] and "matplotlib" in names["dev"]  # optional: pictures only
    for module, extra in optional_examples.items():  # the dev extra installs them, so CI runs their tests
        assert dist(module) in names[extra] and dist(module) in names["dev"], (module, extra)
    missing = sorted(m for m in imported("tests") | imported("benchmarks") if dist(m) not in required | optional)
    assert missing == [], f"imported by the tests or benchmarks but not declared: {missing}"


def test_version_floors():
    _, groups = declared()
    deps = {re.split(r"[<>=!~ ]", r, maxsplit=1)[0].lower(): r for r in groups[""]}
    # the unpickler the resumes read pickles with is unsafe below 2.10 (CVE-2026-24747): pip keeps such a torch out
    assert deps["torch"] == f"torch>={'.'.join(map(str, checkpointing.SAFE_UNPICKLER_TORCH))}" == "torch>=2.10"
    assert deps["accelerate"] == "accelerate>=1.15,<2"  # public API only: any 1.x from the tested one

"""The package's shape: a folder per model family, layers that import only downwards, no cycles,
and short names that resolve to the usual hub ids."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import transcribe
from transcribe import hub
from transcribe.errors import ModelError

PKG = Path(transcribe.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(mod: str, path: Path, known: set[str]) -> set[str]:
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    deps = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            stem = base[: len(base) - node.level + 1] if node.level else []
            prefix = ".".join(stem + ([node.module] if node.module else []))
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n and n != mod and not n.startswith(mod + "."):  # a package may import its own parts
                deps.add(n)
    return deps


def test_no_module_imports_one_that_imports_it_back():
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    cycles, state = [], {}

    def visit(v, stack):
        state[v] = "open"
        for w in sorted(graph[v]):
            if state.get(w) == "open":
                cycles.append(stack[stack.index(w):] + [w])
            elif w not in state:
                visit(w, stack + [w])
        state[v] = "done"

    for v in sorted(graph):
        if v not in state:
            visit(v, [v])
    assert cycles == []


def test_families_do_not_import_each_other_and_layers_do_not_import_families():
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    families = ("transcribe.parakeet", "transcribe.whisper")
    for m, deps in graph.items():
        own = next((f for f in families if m == f or m.startswith(f + ".")), None)
        for d in deps:
            other = next((f for f in families if d == f or d.startswith(f + ".")), None)
            if other is None:
                continue
            if own is None:  # a shared layer: only the loader registry names families, lazily
                assert m == "transcribe.loading", f"{m} imports {d}"
            else:
                assert other == own, f"{m} imports {d}"
    assert (PKG / "parakeet" / "recognizer.py").is_file() and (PKG / "whisper" / "recognizer.py").is_file()


# --- short names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("alias, repo", [
    ("tiny", "openai/whisper-tiny"), ("base.en", "openai/whisper-base.en"), ("large-v3", "openai/whisper-large-v3"),
    ("turbo", "openai/whisper-large-v3-turbo"), ("parakeet-tdt-0.6b-v2", "nvidia/parakeet-tdt-0.6b-v2"),
    ("parakeet-tdt-0.6b-v3", "nvidia/parakeet-tdt-0.6b-v3"),
])
def test_aliases_resolve_to_the_usual_hub_ids(monkeypatch, tmp_path, alias, repo):
    asked = []
    monkeypatch.setattr(hub, "from_hub", lambda r: asked.append(r) or tmp_path)
    assert hub.resolve(alias) == (tmp_path, alias)
    assert asked == [repo]


def test_tiny_en_is_the_installed_default_model(default_whisper_dir, monkeypatch):
    monkeypatch.setattr(hub, "from_hub", lambda r: pytest.fail(f"asked the hub for {r}"))
    assert hub.resolve("tiny.en") == (default_whisper_dir, "tiny.en")
    assert hub.resolve(None) == (default_whisper_dir, "tiny.en")


def test_an_unknown_short_name_lists_the_accepted_forms():
    with pytest.raises(ModelError) as e:
        hub.resolve("tinyy")
    msg = str(e.value)
    assert msg.startswith("unknown model 'tinyy': give a local model file or directory, a Hugging Face id (owner/name)")
    assert "large-v3" in msg and "parakeet-tdt-0.6b-v2" in msg


def test_a_local_path_is_named_by_its_last_part(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    assert hub.resolve(str(d)) == (d, "my-model")

"""The package's shape: a folder per model family (every family registered in loading.FAMILIES),
layers that import only downwards, no cycles (imports of the root package, `import transcribe` /
`from transcribe import ...`, count as imports of transcribe/__init__.py), no family's name in code
outside its folder and loading.py, no table of option names outside them either (the surfaces read the
families' options dataclasses), and short names that resolve to the usual hub ids."""
from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

import transcribe
from transcribe import hub, surfaces
from transcribe.errors import ModelError
from transcribe.loading import FAMILIES

PKG = Path(transcribe.__file__).parent
ROOT = "transcribe"


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
            parts = [f"{prefix}.{a.name}" for a in node.names]
            # `from pkg import part` imports the part; `from pkg import name` runs pkg/__init__.py
            names = [n for n in parts if n in known] + ([prefix] if any(n not in known for n in parts) else [])
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            # a package may import its own parts, except the root package: its parts are everything
            if n and n != mod and (mod == ROOT or not n.startswith(mod + ".")):
                deps.add(n)
    return deps


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def _family_of(mod: str, families: tuple[str, ...]):
    return next((f for f in families if mod == f or mod.startswith(f + ".")), None)


# issue 27: to be moved into the families. Known today, may only shrink: a new cycle fails.
# transcribe/__init__.py's batch() imports jobs.runner, and jobs/work.py imports the root package
# (both inside functions) for load_model.
KNOWN_CYCLES: set = set()  # none left (issue 27)


def _rotated(cycle: list[str]) -> tuple[str, ...]:
    """A cycle [a, b, c, a] as (b, c, a) rotated to start at its smallest module: one name per cycle."""
    ring = cycle[:-1]
    i = ring.index(min(ring))
    return tuple(ring[i:] + ring[:i])


def test_the_root_package_s_imports_are_seen():
    """The checks below would pass vacuously if the root package's imports were dropped (they were:
    its parts counted as its own): cli.py's `import transcribe` and __init__.py's imports are edges."""
    graph = _graph()
    assert ROOT in graph["transcribe.cli"]
    assert {"transcribe.loading", "transcribe.results", "transcribe.errors"} <= graph[ROOT]
    assert ROOT not in graph["transcribe.gguf.file"]  # `from . import quants` imports the part only


def test_no_module_imports_one_that_imports_it_back():
    graph = _graph()
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
    new = {_rotated(c) for c in cycles} - KNOWN_CYCLES
    assert new == set(), "import cycles (issue 27: only the known ones may remain, and they are to go)"


def test_each_family_is_registered_once_and_each_folder_is_a_family():
    """One line per family in loading.FAMILIES (a second line of one family, left by a merge, would ask it
    twice and put it ahead of a family that must come first), and every folder holding a family contract
    (an __init__.py with detect and load) is registered."""
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names)), [n for n, c in Counter(names).items() if c > 1]
    assert len({f.module for f in FAMILIES}) == len(FAMILIES)
    contracts = {p.parent.name for p in PKG.glob("*/__init__.py")
                 if "def detect(" in p.read_text(encoding="utf-8") and "def load(" in p.read_text(encoding="utf-8")}
    assert contracts <= {f.module.split(".")[-1] for f in FAMILIES}, contracts


def test_families_do_not_import_each_other_and_layers_do_not_import_families():
    """Every family in the registry (not a list written here): a family imports no other family, and
    a shared layer (the root package included) imports none; only loading.py names them, lazily."""
    graph = _graph()
    families = tuple(f.module for f in FAMILIES)
    assert len(families) >= 3 and all(f.startswith(ROOT + ".") for f in families)
    for f in families:  # a folder per family
        assert (PKG / f.split(".", 1)[1].replace(".", "/") / "recognizer.py").is_file(), f
    for m, deps in graph.items():
        own = _family_of(m, families)
        for d in deps:
            other = _family_of(d, families)
            if other is None:
                continue
            if own is None:  # a shared layer: only the loader registry names families, lazily
                assert m == "transcribe.loading", f"{m} imports {d}"
            else:
                assert other == own, f"{m} imports {d}"


# issue 27: to be moved into the families. A family's name in code outside its folder and loading.py
# (a comparison `family == "whisper"`, a table keyed or valued by family names): today's, per file and
# name, may only shrink; a new one fails.
KNOWN_FAMILY_NAMES: Counter = Counter()  # none left (issue 27): the list may only stay empty
# Not a family's name: the transformers model_type of IBM's Granite LM ("granite"), which the generation layer
# reads from the text configs of the audio-LLMs (it is also the Granite Speech NAR family's registry name); the
# hub's short name "medasr" for google/medasr (an alias, the same word as the family's registry name).
NOT_FAMILY_NAMES = {("transcribe/llm/config.py", "granite"), ("transcribe/hub.py", "medasr")}


def _shared_layer_nodes():
    """(path relative to the repository, AST node) of every node of every module outside the family
    folders and loading.py."""
    folders = [PKG / f.module.split(".", 1)[1].replace(".", "/") for f in FAMILIES]
    for p in sorted(PKG.rglob("*.py")):
        if p == PKG / "loading.py" or any(d in p.parents for d in folders):
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            yield p.relative_to(PKG.parent).as_posix(), node


def _family_names_outside_families() -> Counter:
    names = {f.name for f in FAMILIES}
    found: Counter = Counter()
    for where, node in _shared_layer_nodes():
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names and \
                (where, node.value) not in NOT_FAMILY_NAMES:
            found[(where, node.value)] += 1
    return found


def test_no_family_name_branches_outside_the_families():
    found = _family_names_outside_families()
    grown = {k: n for k, n in found.items() if n > KNOWN_FAMILY_NAMES[k]}
    assert grown == {}, "a family's name outside its folder and loading.py (issue 27: move it into the family)"


def test_the_family_name_scan_finds_a_comparison(tmp_path, monkeypatch):
    """The scan sees `== "whisper"` and `in ("parakeet", ...)` in a shared layer (so the check above can fail)."""
    names = [f.name for f in FAMILIES]
    fake = tmp_path / "transcribe"
    (fake / "server").mkdir(parents=True)
    (fake / "server" / "x.py").write_text(
        f"def f(m):\n    return m.family == {names[0]!r} or m.family in ({names[1]!r}, {names[2]!r})\n")
    monkeypatch.setitem(globals(), "PKG", fake)
    assert _family_names_outside_families() == Counter({("transcribe/server/x.py", n): 1 for n in names[:3]})


# --- option names (issue 27): declared once, in the families' options dataclasses ------------------
# A table of option names outside the families (the command's flag list, the server's extra form fields,
# the WebSocket's session options, which family takes which flag) goes stale as the families change: the
# surfaces read the dataclasses (transcribe/surfaces.py). The scan looks, in every module outside a family's
# folder and loading.py, for the option names some registered family takes and another does not
# (surfaces.partial_options, computed from every family in loading.FAMILIES):
# - a table: a tuple, list or set display holding two or more of them, or a dict display with two or more
#   of them as keys whose values are all static data (constants, names, displays of those), as the old
#   EXTRA_FIELDS = {"beam_size": int, ...}, STREAM_OPTIONS = ("att_context_size", ...) and _FAMILY were;
#   a record built from computed values ({"language": self.language, "nbest": ...} in Transcript.to_dict,
#   OpenAI's verbose_json body) is data, not a table;
# - a comparison with one (`option == "score_norm"`, `key in ("chunk_s", ...)`): a branch on an option name.
# Options every family takes (batch_size, sample_rate, timestamps, word_timestamps) are no family's, so
# they are not looked for: the command's own --batch-size and the socket's sample_rate may name them.
KNOWN_OPTION_TABLES: Counter = Counter()  # none today; one that comes back fails
# Not tables of our options: transformers' config keys that share names with options (the legacy generation
# defaults an older text_config carries), listed by the LM config reader as not changing the network.
NOT_OPTION_TABLES = {("transcribe/llm/config.py", "length_penalty, prefix, temperature"),
                     # generation_config.json's keys (the file's settings, read or known to be harmless)
                     ("transcribe/llm/generation_config.py", "length_penalty, max_new_tokens, temperature")}


def _static(node) -> bool:
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_static(e) for e in node.elts)
    return False


def _option_names_in(node, partial: frozenset) -> list[str]:
    """The option names a table or a comparison holds ([] for anything else)."""
    def named(nodes):
        return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and n.value in partial]

    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        found = named(node.elts)
        return found if len(found) >= 2 else []
    if isinstance(node, ast.Dict):
        found = named([k for k in node.keys if k is not None])
        return found if len(found) >= 2 and all(_static(v) for v in node.values) else []
    if isinstance(node, ast.Compare):
        return named([node.left, *node.comparators])
    return []


def _option_tables_outside_families(partial: frozenset) -> Counter:
    found: Counter = Counter()
    for where, node in _shared_layer_nodes():
        names = _option_names_in(node, partial)
        if names:
            found[(where, ", ".join(sorted(set(names))))] += 1
    return found


def test_the_option_names_looked_for_cover_every_registered_family():
    """Every family in loading.FAMILIES adds its options (each has some the others lack), and the names
    are computed, not listed here: a family's option that another lacks is among them."""
    partial = surfaces.partial_options()
    for family in FAMILIES:
        taken = {f.name for f in dataclasses.fields(family.options)}
        if family.stream_options is not None:
            taken |= {f.name for f in dataclasses.fields(family.stream_options)}
        others = [f for f in FAMILIES if f is not family]
        assert taken & partial, family.name
        for name in taken:
            everywhere = all(name in {f.name for f in dataclasses.fields(o.options)} |
                             ({f.name for f in dataclasses.fields(o.stream_options)} if o.stream_options else set())
                             for o in others)
            assert (name in partial) == (not everywhere), (family.name, name)


def test_no_option_name_tables_outside_the_families():
    found = _option_tables_outside_families(surfaces.partial_options())
    grown = {k: n for k, n in found.items() if n > KNOWN_OPTION_TABLES[k] and k not in NOT_OPTION_TABLES}
    assert grown == {}, ("a table of option names, or a branch on one, outside the families and loading.py "
                         "(issue 27: read them from the families' options dataclasses, transcribe/surfaces.py)")


def test_the_option_table_scan_finds_the_old_tables(tmp_path, monkeypatch):
    """The scan sees what the surfaces had before issue 27 (so the check above can fail), and leaves a
    record of computed values and a lone option name alone."""
    partial = surfaces.partial_options()
    a, b, c = sorted(partial)[:3]
    fake = tmp_path / "transcribe"
    (fake / "server").mkdir(parents=True)
    (fake / "server" / "x.py").write_text(
        f"EXTRA = {{{a!r}: int, {b!r}: float}}\n"
        f"ONLY = ({a!r}, {c!r})\n"
        f"def flag(o):\n    return 1 if o == {b!r} else 2\n"
        f"def record(t):\n    return {{{a!r}: t.x, {b!r}: t.y}}, {{{c!r}: 1}}, t.get({a!r})\n")
    monkeypatch.setitem(globals(), "PKG", fake)
    assert _option_tables_outside_families(partial) == Counter({
        ("transcribe/server/x.py", f"{a}, {b}"): 1, ("transcribe/server/x.py", f"{a}, {c}"): 1,
        ("transcribe/server/x.py", b): 1})


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

"""`transcribe convert` / `transcribe.parakeet.gguf_export`: NeMo Parakeet checkpoints written as GGUF files
in the parakeet.cpp and transcribe.cpp schemas, compared with the files the upstream converters and
quantizers made from the same tiny models (../shared/models/gguf, README there):

* every model x schema x type (f32/q8_0/q4_0): same keys in the same order, same value types, equal
  values (floats bit for bit), same tensor names, order, ggml types and shapes, equal tensor bytes, and
  in the end the whole file byte-identical;
* the CLI (subprocess and main()) with its exit codes; f16 by the schemas' rules (no upstream file);
* exported F32 files load through `load_model` and give the .nemo's token ids on jfk.wav;
* the EOU model (no upstream file) in both schemas;
* errors: not a model, OUT in the way, unknown type/schema, models a schema cannot express; a failed
  conversion leaves nothing behind.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
import yaml

from .conftest import MODELS, REPO, SHARED, TINY
from transcribe.convert import main as convert_main
from transcribe.gguf import quants
from transcribe.gguf.file import GGUFFile
from transcribe.parakeet.gguf_export import export, variant_of

GGUF = SHARED / "models" / "gguf"
CPP = GGUF / "parakeet-cpp"
TCPP = GGUF / "transcribe-cpp"
JFK = SHARED / "audio" / "jfk.wav"
NAMES = ("tiny-ctc-fit", "tiny-rnnt-fit", "tiny-tdt-fit", "tiny-hybrid-tdt-ctc-fit", "tiny-tdt-streaming-random",
         "tiny-ctc-streaming-random")
TYPES = ("f32", "q8_0", "q4_0")


def _tcpp_meta(model: str) -> dict:
    """The identity keys the upstream wrapper's per-model profile gave (README step 3): display name,
    size label, and the basename/version of the published profile it was copied from."""
    slug = model.replace("hybrid-tdt-ctc", "hybrid-tdt_ctc")  # the converter keys the hybrid on 'tdt_ctc'
    version = "v2" if model in ("tiny-tdt-fit", "tiny-tdt-streaming-random") else "v1"
    return {"general.name": f"{slug} (tiny test model)", "general.size_label": "tiny",
            "general.version": version, "stt.variant": slug}


def _float_bits(v):
    if isinstance(v, list):
        return [_float_bits(x) for x in v]
    return struct.pack("<f", v) if isinstance(v, float) else v


def assert_same_gguf(got_path: Path, want_path: Path) -> None:
    got, want = GGUFFile(got_path), GGUFFile(want_path)
    try:
        assert list(got.meta) == list(want.meta), "metadata keys or their order differ"
        for key in want.meta:
            assert got.value_types[key] == want.value_types[key], key
            if "FLOAT32" in want.value_types[key]:
                assert _float_bits(got.meta[key]) == _float_bits(want.meta[key]), key  # -0.0 vs 0.0 counts
            else:
                assert got.meta[key] == want.meta[key], key
        assert list(got.tensors) == list(want.tensors), "tensor names or their order differ"
        for name, w in want.tensors.items():
            g = got.tensors[name]
            assert (g.type_name, g.shape) == (w.type_name, w.shape), name
            assert bytes(got.raw(name)) == bytes(want.raw(name)), f"{name} ({w.type_name}) bytes differ"
    finally:
        got.close()
        want.close()
    assert got_path.read_bytes() == want_path.read_bytes()  # header, alignment, padding too


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("model", NAMES)
def test_parakeet_cpp_equals_upstream(model, qtype, tmp_path):
    out = export(TINY / f"{model}.nemo", tmp_path / f"{model}-{qtype}.gguf", "parakeet.cpp", qtype,
                 name=f"parakeet-tiny/{model}.nemo")
    assert_same_gguf(out, CPP / f"{model}-{qtype}.gguf")


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("model", NAMES)
def test_transcribe_cpp_equals_upstream(model, qtype, tmp_path):
    q = qtype.upper()
    out = export(TINY / f"{model}.nemo", tmp_path / f"{model}-{q}.gguf", "transcribe.cpp", qtype,
                 meta=_tcpp_meta(model))
    assert_same_gguf(out, TCPP / f"{model}-{q}.gguf")


def test_cli_subprocess_writes_the_upstream_file(tmp_path):
    """Upstream's converter ran from shared/models and stored the model path as typed as general.name;
    ours stores the model's name, so the upstream file is reproduced by giving that name."""
    out = tmp_path / "ctc.gguf"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "transcribe", "convert", "parakeet-tiny/tiny-ctc-fit.nemo", str(out),
                        "--schema", "parakeet.cpp", "--type", "q8_0",
                        "--meta", "general.name=parakeet-tiny/tiny-ctc-fit.nemo"],
                       cwd=SHARED / "models", env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and r.stdout == ""  # progress only on a terminal
    assert_same_gguf(out, CPP / "tiny-ctc-fit-q8_0.gguf")
    assert [p.name for p in tmp_path.iterdir()] == ["ctc.gguf"]  # no temporary left


def test_the_file_does_not_depend_on_the_working_directory(tmp_path):
    """general.name is the model's name, not the path as typed: the same model converted from two working
    directories gives the same bytes."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    outs = []
    for cwd, model in ((SHARED / "models", "parakeet-tiny/tiny-ctc-fit.nemo"), (TINY, "tiny-ctc-fit.nemo")):
        out = tmp_path / f"{len(outs)}.gguf"
        r = subprocess.run([sys.executable, "-m", "transcribe", "convert", model, str(out), "--type", "q8_0"],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(out)
    assert GGUFFile(outs[0]).meta["general.name"] == "tiny-ctc-fit.nemo"
    assert outs[0].read_bytes() == outs[1].read_bytes()


def test_cli_main_transcribe_cpp_with_meta(tmp_path, capsys):
    out = tmp_path / "tiny-hybrid-tdt_ctc-fit-Q4_0.gguf"
    args = ["convert", str(TINY / "tiny-hybrid-tdt-ctc-fit.nemo"), str(out), "--schema", "transcribe.cpp",
            "--type", "Q4_0", "--meta", "general.name=tiny-hybrid-tdt_ctc-fit (tiny test model)",
            "--meta", "general.size_label=tiny"]
    from transcribe.cli import main

    assert main(args) == 0, capsys.readouterr().err
    # stt.variant and the version come from the file name and the defaults
    assert_same_gguf(out, TCPP / "tiny-hybrid-tdt-ctc-fit-Q4_0.gguf")


def test_progress_only_on_a_terminal(tmp_path, capsys, monkeypatch):
    import transcribe.convert as conv

    monkeypatch.setattr(conv, "_isatty", lambda stream: True)
    out = tmp_path / "p.gguf"
    assert conv.main([str(TINY / "tiny-ctc-fit.nemo"), str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith(f"transcribe convert: wrote {out} (parakeet.cpp, f32, ")


def test_variant_from_file_name():
    assert variant_of("dir/tiny-tdt-fit-F32.gguf") == "tiny-tdt-fit"
    assert variant_of("tiny-tdt-fit-q4_0.gguf") == "tiny-tdt-fit"
    assert variant_of("x/parakeet-tdt-0.6b-v3-Q4_K_M.gguf") == "parakeet-tdt-0.6b-v3"
    assert variant_of("model.gguf") == "model"


def test_typed_meta_overrides(tmp_path):
    out = export(TINY / "tiny-tdt-fit.nemo", tmp_path / "m.gguf", "transcribe.cpp", "f32",
                 meta={"general.languages": "en,de", "stt.parakeet.tdt.max_symbols": "7",
                       "stt.capability.lang_detect": "true", "stt.frontend.dither": "0.5"})
    f = GGUFFile(out)
    assert f.meta["general.languages"] == ["en", "de"] and f.value_types["general.languages"] == ("ARRAY", "STRING")
    assert f.meta["stt.parakeet.tdt.max_symbols"] == 7 and f.value_types["stt.parakeet.tdt.max_symbols"] == ("UINT32",)
    assert f.meta["stt.frontend.dither"] == 0.5
    keys = list(f.meta)
    assert keys[keys.index("stt.capability.streaming") + 1] == "stt.capability.lang_detect"
    assert f.meta["stt.capability.lang_detect"] is True
    f.close()
    assert convert_main([str(TINY / "tiny-tdt-fit.nemo"), str(tmp_path / "n.gguf"), "--schema", "transcribe.cpp",
                         "--meta", "stt.parakeet.tdt.max_symbols=many"]) == 2
    assert not (tmp_path / "n.gguf").exists()


def test_f16_follows_each_schemas_rules(tmp_path):
    src = TINY / "tiny-tdt-fit.nemo"
    for schema, up in (("parakeet.cpp", CPP / "tiny-tdt-fit-q8_0.gguf"), ("transcribe.cpp", TCPP / "tiny-tdt-fit-Q8_0.gguf")):
        f16 = GGUFFile(export(src, tmp_path / f"{schema}-F16.gguf", schema, "f16"))
        f32 = GGUFFile(export(src, tmp_path / f"{schema}-F32.gguf", schema, "f32"))
        q8 = GGUFFile(up)
        assert list(f16.tensors) == list(q8.tensors)
        n16 = 0
        for name, info in f16.tensors.items():
            # F16 exactly where the q8_0 file has a non-F32 type (block 32 fits every tensor here)
            assert (info.qtype == quants.F16) == (q8.tensors[name].qtype != quants.F32), name
            want = f32.tensor(name)
            if info.qtype == quants.F16:
                n16 += 1
                assert torch.equal(f16.tensor(name), want.to(torch.float16).float()), name
            else:
                assert bytes(f16.raw(name)) == bytes(f32.raw(name)), name
        assert n16 >= 21
        if schema == "transcribe.cpp":
            assert f16.meta["general.file_type"] == 1
            assert list(f16.meta)[-4] == "general.file_type"
        else:
            assert "general.file_type" not in f16.meta
        for f in (f16, f32, q8):
            f.close()


def _ids(t):
    return [x.id for x in t.tokens]


@pytest.mark.parametrize("model", NAMES)
def test_exported_f32_round_trips_through_the_loader(model, tmp_path):
    """Needs the Parakeet GGUF loader (transcribe/parakeet/gguf.py)."""
    from transcribe import load_model

    nemo = load_model(TINY / f"{model}.nemo")
    heads = ["tdt", "ctc"] if "hybrid" in model else [None]
    for schema in ("parakeet.cpp", "transcribe.cpp"):
        path = export(TINY / f"{model}.nemo", tmp_path / f"{model}-{schema}-F32.gguf", schema, "f32")
        asr = load_model(path)
        for head in heads:
            if schema == "transcribe.cpp" and head == "ctc":
                continue  # transcribe.cpp ships a hybrid as TDT only
            want = _ids(nemo.transcribe(JFK, head=head))
            got = _ids(asr.transcribe(JFK, head=head))
            assert len(want) > 0
            assert got == want, (schema, head)


def test_eou_model_exports_to_both_schemas(tmp_path):
    import gguf

    src = MODELS / "tiny-eou-streaming.nemo"
    pcpp = export(src, tmp_path / "eou-f32.gguf", "parakeet.cpp", "f32", name="tiny-eou-streaming.nemo")
    tcpp = export(src, tmp_path / "tiny-eou-streaming-Q8_0.gguf", "transcribe.cpp", "q8_0")
    for path in (pcpp, tcpp):
        r = gguf.GGUFReader(str(path))
        assert len(r.tensors) > 50
    # Same encoder/streaming settings as the TDT streaming model (same encoder config): same keys, same values
    for mine, ref, prefixes in ((pcpp, CPP / "tiny-tdt-streaming-random-f32.gguf",
                                 ("parakeet.encoder.", "parakeet.streaming.", "parakeet.preprocessor.")),
                                (tcpp, TCPP / "tiny-tdt-streaming-random-F32.gguf",
                                 ("stt.parakeet.encoder.", "stt.frontend.", "stt.capability."))):
        a, b = GGUFFile(mine), GGUFFile(ref)
        ka = [k for k in a.meta if k.startswith(prefixes)]
        kb = [k for k in b.meta if k.startswith(prefixes)]
        assert ka == kb and len(ka) > 10
        for k in ka:
            assert (a.value_types[k], a.meta[k]) == (b.value_types[k], b.meta[k]), k
        a.close()
        b.close()
    p = GGUFFile(pcpp)
    assert p.meta["parakeet.arch"] == "rnnt" and "parakeet.tdt.durations" not in p.meta
    pieces = p.meta["parakeet.tokenizer.pieces"]
    assert pieces[-2:] == ["<EOU>", "<EOB>"] and p.meta["parakeet.vocab_size"] == len(pieces) == p.meta["parakeet.blank_id"]
    t = GGUFFile(tcpp)
    tokens, types = t.meta["tokenizer.ggml.tokens"], t.meta["tokenizer.ggml.token_type"]
    assert tokens[:-1] == pieces and tokens[-1] == "<blank>"
    assert types[tokens.index("<EOU>")] == 1 and types[tokens.index("<EOB>")] == 1  # user-defined: normal
    assert types[0] == 2 and types[-1] == 3  # <unk> unknown, <blank> control
    assert t.meta["tokenizer.ggml.blank_token_id"] == len(pieces)
    assert t.meta["general.file_type"] == 7 and t.meta["stt.variant"] == "tiny-eou-streaming"
    assert t.meta["stt.parakeet.head_kind"] == "rnnt" and t.meta["stt.parakeet.joint.num_extra_outputs"] == 0
    assert t.tensors["pred.lstm.0.Wx"].type_name == "Q8_0" and t.tensors["enc.blocks.0.conv.pointwise1.weight"].type_name == "F16"
    p.close()
    t.close()


# ---------------------------------------------------------------------------------------------------
# Errors


def _run(args, capsys):
    code = convert_main([str(a) for a in args])
    err = capsys.readouterr().err
    return code, err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("transcribe: error: "), err
    return lines[0]


def _nemo_dir(tmp_path: Path, edit) -> Path:
    """tiny-tdt-fit unpacked into a NeMo directory with its config edited."""
    d = tmp_path / "edited"
    d.mkdir()
    with tarfile.open(TINY / "tiny-tdt-fit.nemo") as tar:
        tar.extractall(d, filter="data")
    cfg = yaml.safe_load((d / "model_config.yaml").read_text())
    edit(cfg)
    (d / "model_config.yaml").write_text(yaml.safe_dump(cfg))
    return d


def test_not_a_model(tmp_path, capsys):
    junk = tmp_path / "junk.nemo"
    junk.write_text("not a model")
    out = tmp_path / "out.gguf"
    code, err = _run([junk, out], capsys)
    assert code == 2 and "not a .nemo archive" in _one_error_line(err)
    code, err = _run([tmp_path / "missing.nemo", out], capsys)
    assert code == 2 and "no such model" in _one_error_line(err)
    code, err = _run([CPP / "tiny-ctc-fit-f32.gguf", out], capsys)
    assert code == 2 and "already a GGUF file" in _one_error_line(err)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = _run([empty, out], capsys)
    assert code == 2 and "not a model" in _one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "junk.nemo"]


def test_existing_out_needs_force(tmp_path, capsys):
    out = tmp_path / "out.gguf"
    out.write_bytes(b"keep me")
    code, err = _run([TINY / "tiny-ctc-fit.nemo", out], capsys)
    assert code == 2 and "already exists" in _one_error_line(err)
    assert out.read_bytes() == b"keep me"
    code, err = _run([TINY / "tiny-ctc-fit.nemo", out, "--force", "--type", "q4_0"], capsys)
    assert code == 0, err
    assert GGUFFile(out).meta["general.name"] == "tiny-ctc-fit.nemo"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf"]


@pytest.mark.parametrize("args,needle", [
    (["--type", "q5_0"], "--type"),
    (["--schema", "llama.cpp"], "--schema"),
    (["--meta", "no-equals-sign"], "KEY=VALUE"),
    (["--meta", "general.nonsense=1"], "general.nonsense"),
    (["--type", "bf16"], "bf16"),
    (["--bogus"], "--bogus"),
])
def test_usage_errors(args, needle, tmp_path, capsys):
    out = tmp_path / "out.gguf"
    code, err = _run([TINY / "tiny-tdt-fit.nemo", out, *args], capsys)
    assert code == 2 and needle in _one_error_line(err)
    assert list(tmp_path.iterdir()) == []


def _prompt(cfg):
    cfg["target"] = "nemo.collections.asr.models.rnnt_bpe_models_prompt.EncDecRNNTBPEModelWithPrompt"
    cfg.setdefault("model_defaults", {})["initialize_prompt_feature"] = True


def _local_attention(cfg):
    cfg["encoder"]["self_attention_model"] = "rel_pos_local_attn"
    cfg["encoder"]["att_context_size"] = [64, 64]


def _all_features(cfg):
    cfg["preprocessor"]["normalize"] = "all_features"


@pytest.mark.parametrize("edit,schema,needle", [
    (_prompt, "parakeet.cpp", "prompt"),
    (_prompt, "transcribe.cpp", "prompt"),
    (_local_attention, "parakeet.cpp", "rel_pos_local_attn"),
    (_local_attention, "transcribe.cpp", "rel_pos_local_attn"),
    (_all_features, "transcribe.cpp", "all_features"),
])
def test_models_a_schema_cannot_express(edit, schema, needle, tmp_path, capsys):
    src = _nemo_dir(tmp_path, edit)
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "m.gguf"
    code, err = _run([src, out, "--schema", schema], capsys)
    assert code == 2 and needle in _one_error_line(err)
    assert list(outdir.iterdir()) == []  # no OUT, no temporary
    # and an existing OUT is left as it was when --force conversion fails
    out.write_bytes(b"old")
    code, err = _run([src, out, "--schema", schema, "--force"], capsys)
    assert code == 2 and out.read_bytes() == b"old" and [p.name for p in outdir.iterdir()] == ["m.gguf"]


def test_all_features_is_fine_for_parakeet_cpp(tmp_path):
    """parakeet.cpp stores the NeMo normalize string, so the same model converts there."""
    src = _nemo_dir(tmp_path, _all_features)
    f = GGUFFile(export(src, tmp_path / "m.gguf", "parakeet.cpp", "f32"))
    assert f.meta["parakeet.preprocessor.normalize"] == "all_features"


def test_granite_through_convert(tmp_path, capsys):
    """A Granite Speech NAR directory goes to transcribe.granite.gguf_export.export_gguf (transcribe.cpp only)."""
    src = SHARED / "models" / "granite-nar-tiny"
    out = tmp_path / "granite-nar-tiny-BF16.gguf"
    code, err = _run([src, out], capsys)
    assert code == 0, err
    assert_same_gguf(out, TCPP / "granite-nar-tiny-BF16.gguf")
    code, err = _run([src, tmp_path / "g2.gguf", "--schema", "parakeet.cpp"], capsys)
    assert code == 2 and "transcribe.cpp" in _one_error_line(err)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]

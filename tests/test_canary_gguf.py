"""transcribe.cpp's Canary GGUF files (tests/models/gguf/canary: made from canary-tiny.nemo by its own
converter and quantizer; README there) against its runtime's outputs: the same text on every run, and the
token ids NeMo gives for that text (with the encoder's xscaling off, which the schema cannot carry and the
runtime never applies; see canary/gguf.py). Q8_0 weights are dequantized exactly, so the Q8_0 file's
decisions are those of its own weights, like the runtime's."""
import json
import shutil
import struct
from pathlib import Path

import pytest

import transcribe
from transcribe.errors import ModelError

from .conftest import SHARED

HERE = Path(__file__).parent / "models" / "gguf" / "canary"
FILES = ["canary-tiny-F32.gguf", "canary-tiny-Q8_0.gguf"]
OPTIONS = {"asr_en_pnc": {}, "asr_en_nopnc": {"pnc": False}, "ast_en_de": {"target_language": "de"},
           "asr_en_default": {}}


def _runs(name: str) -> list:
    return json.loads((HERE / name.replace(".gguf", ".ref.json")).read_text())["runs"]


CASES = [(f, i) for f in FILES for i in range(len(_runs(f)))]


@pytest.fixture(scope="module")
def models():
    return {f: transcribe.load_model(str(HERE / f)) for f in FILES}


@pytest.mark.parametrize("name,i", CASES, ids=[f"{f[12:-5]}-{r['task']}-{Path(r['audio']).stem}"
                                               for f, i in CASES for r in [_runs(f)[i]]])
def test_the_runtime_s_text_and_nemo_s_ids(models, name, i):
    run = _runs(name)[i]
    t = models[name].transcribe(str(SHARED / run["audio"]), **OPTIONS[run["task"]])
    assert t.text == run["text"]
    assert [tok.id for tok in t.tokens] == run["vs_nemo_xscaling_off"]["nemo_output_ids"]


def test_the_file_s_model_is_the_nemo_model_without_xscaling(models):
    """The F32 file holds the checkpoint's tensors bit for bit: with the .nemo's encoder told not to
    scale, the two give the same states (to float32 rounding: the .nemo's filterbank is the one stored in
    its checkpoint, the GGUF's is computed from the settings, equal to a few ulps)."""
    import torch

    nemo = transcribe.load_model(str(SHARED / "models" / "canary-tiny" / "canary-tiny.nemo"))
    gguf = models[FILES[0]]
    assert nemo.model.encoder.xscale is not None and gguf.model.encoder.xscale is None
    x = transcribe.load_audio(str(SHARED / "audio" / "jfk.wav"))
    audio, n = torch.from_numpy(x)[None], torch.tensor([len(x)])
    nemo.model.encoder.xscale = None  # (a model of this test's own)
    a, _ = nemo.model.encode(audio, n)
    b, _ = gguf.model.encode(audio, n)
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    assert gguf.languages == ["de", "en", "es", "fr"]


def _edited(tmp_path, key: bytes, new: bytes) -> Path:
    data = (HERE / FILES[0]).read_bytes()
    at = data.index(key)
    out = tmp_path / "edited.gguf"
    out.write_bytes(data[:at] + new + data[at + len(new):])
    return out


def test_a_key_this_code_does_not_know_is_an_error(tmp_path):
    path = _edited(tmp_path, b"stt.canary.tokenizer.single_sp", b"stt.canary.tokenizer.single_xp")
    with pytest.raises(ModelError, match="metadata key this code does not implement: stt.canary.tokenizer.single_xp"):
        transcribe.load_model(str(path))


def test_a_tensor_this_code_does_not_know_is_an_error(tmp_path):
    path = _edited(tmp_path, b"dec.embed.pos_enc", b"dec.embed.pos_exc")
    with pytest.raises(ModelError, match="tensor dec.embed.pos_exc is not part of a Canary model"):
        transcribe.load_model(str(path))


def test_a_wrong_special_token_id_is_an_error(tmp_path):
    data = (HERE / FILES[0]).read_bytes()
    key = b"stt.canary.special.pnc_id"
    at = data.index(key) + len(key) + 4  # the value's type (u32), then the value
    out = tmp_path / "edited.gguf"
    out.write_bytes(data[:at] + struct.pack("<I", 6) + data[at + 4:])
    with pytest.raises(ModelError, match=r"stt.canary.special.pnc_id = 6 is not the id of <\|pnc\|>"):
        transcribe.load_model(str(out))


def test_the_command_reads_the_file(capsys, tmp_path):
    from transcribe.cli import main

    path = tmp_path / "m.gguf"
    shutil.copy(HERE / FILES[1], path)
    assert main([str(SHARED / "audio" / "jfk.wav"), "--model", str(path), "--no-pnc"]) == 0
    assert capsys.readouterr().out.strip() == \
        "the junction of valencia creek and the avon river are a short distance upstream"


# ---------------------------------------------------------------------------------------------- writing

# The identity keys the upstream converter took from its profile for this file (README section 1).
UPSTREAM_META = {"general.name": "canary-tiny (tiny test model)", "general.version": "tiny", "general.size_label": "tiny",
                 "general.repo_url": "https://huggingface.co/canary-tiny", "stt.variant": "canary-tiny"}


@pytest.fixture(scope="module")
def unscaled(tmp_path_factory) -> Path:
    """canary-tiny.nemo with `xscaling: false` (the one setting the schema cannot carry), as the upstream
    files were made from it in effect (their runtime never scales)."""
    import io
    import tarfile

    out = tmp_path_factory.mktemp("noxs") / "canary-tiny.nemo"
    with tarfile.open(SHARED / "models" / "canary-tiny" / "canary-tiny.nemo") as src, tarfile.open(out, "w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name.endswith("model_config.yaml"):
                data = data.replace(b"xscaling: true", b"xscaling: false")
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    return out


@pytest.mark.parametrize("qtype,name", [("f32", FILES[0]), ("q8_0", FILES[1])])
def test_convert_writes_the_upstream_tools_file_byte_for_byte(tmp_path, unscaled, qtype, name):
    from transcribe.cli import main

    out = tmp_path / "m.gguf"
    args = ["convert", str(unscaled), str(out), "--type", qtype]
    for k, v in UPSTREAM_META.items():
        args += ["--meta", f"{k}={v}"]
    assert main(args) == 0
    assert out.read_bytes() == (HERE / name).read_bytes()


@pytest.mark.parametrize("qtype", ["f16", "q4_0"])
def test_other_types_load(tmp_path, unscaled, models, qtype):
    """F16 keeps jfk's text; Q4_0 (a 4-bit step per block of 32) moves this fragile tiny model's decisions,
    so only its weights are checked: within one quantization step (a block's max / 7) of the F32 file's."""
    from transcribe.canary.gguf_export import export

    out = export(unscaled, tmp_path / f"m-{qtype}.gguf", qtype=qtype)
    m = transcribe.load_model(str(out))
    ref = models[FILES[0]]
    clip = str(SHARED / "audio" / "jfk.wav")
    if qtype == "f16":
        assert m.transcribe(clip).text == ref.transcribe(clip).text
    w, w0 = m.model.log_softmax.mlp.layer0.weight, ref.model.log_softmax.mlp.layer0.weight
    assert (w - w0).abs().max() <= w0.abs().max() / 7
    assert m.transcribe(clip).duration == pytest.approx(11.0)


def test_convert_refuses_what_the_schema_cannot_carry(tmp_path, capsys):
    from transcribe.cli import main

    assert main(["convert", str(SHARED / "models" / "canary-tiny" / "canary-tiny.nemo"), str(tmp_path / "x.gguf")]) == 2
    assert "encoder.xscaling = true cannot be written" in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()

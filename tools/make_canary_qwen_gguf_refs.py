"""A Canary-Qwen GGUF file written by transcribe.cpp's own converter from the tiny model, and what transcribe.cpp's
runtime transcribes from it (tests/models/gguf/canary_qwen/, README there). Two steps, each in its own Python:

    # 1. BF16 file: upstream scripts/convert-canary-qwen.py, unmodified, on a WIDE copy of tests/models/canary_qwen/tiny
    #    (below). UPSTREAM: a `git archive` of handy-computer/transcribe.cpp (its scripts/ folder). The Python needs
    #    NeMo (the converter loads the model with SALM.from_pretrained and merges LoRA with PEFT) and the gguf package
    OMP_NUM_THREADS=1 PYTHONPATH=<gguf package> <nemo python> tools/make_canary_qwen_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 <tcpp-venv>/bin/python tools/make_canary_qwen_gguf_refs.py refs

The converter is written for nvidia/canary-qwen-2.5b alone: it takes the variant from `--repo-id` (so
`--repo-id nvidia/canary-qwen-2.5b`), puts the audio placeholder at the published id 151669 and refuses an LM with
fewer embedding rows, and fetches the LM's tokenizer (vocab.json, merges.txt, tokenizer_config.json) from the hub
repo `Qwen/Qwen3-1.7B`. So step 1
 - widens the tiny model to the published 151,936 embedding rows (`llm_backbone/config.json` vocab_size and
   `embed_tokens.weight`; the new rows are zero: no token of the tiny tokenizer has them, and a zero row's logit, 0,
   is below every greedy choice the model makes here: the tiny model's outputs are unchanged, checked by the test);
 - writes the tiny tokenizer in Qwen/Qwen3-1.7B's file layout (vocab.json with the BPE pieces, merges.txt, and
   tokenizer_config.json with the added tokens in `added_tokens_decoder`, eos `<|im_end|>`, pad `<|endoftext|>`)
   into a scratch Hugging Face cache as `Qwen/Qwen3-1.7B`, and runs the converter offline against that cache;
 - gzips the file (`canary-qwen-tiny-BF16.gguf.gz`: 19 MB of which the zero rows are most; the test unpacks it).
Nothing of the converter is changed. Under transformers 5 (NeMo 3's) the converter writes
`stt.canary_qwen.decoder.rope_theta` 10000, its default, where the model runs 1e6: it reads `config.rope_theta`,
which transformers 5 keeps only in `rope_parameters` (a top-level `rope_theta` in the LM's config.json is moved
there too). So the file is not the tiny model: its text is not the tiny model's, and both runtimes decode the same
garbage from it (what the test compares).

Step 2 writes `canary-qwen-tiny-BF16.ref.json`: for jfk.wav and the dev clips of tests/references/canary_qwen/,
`transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1).run(pcm, timestamps="none")` -> text, raw_text and
the tokens' ids.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

TINY = R.REPO / "tests" / "models" / "canary_qwen" / "tiny"
HOME = R.GGUF / "canary_qwen"
STEM = "canary-qwen-tiny-BF16"
ROWS = 151936
LM_REPO = "Qwen/Qwen3-1.7B"
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/ls_1089-134691-0001.wav",
         "audio/dev/fleurs_en_004.wav"]
HOW = ("tools/make_canary_qwen_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> session(n_threads=1) "
       "-> run(pcm float32 16 kHz mono, timestamps='none') -> text, raw_text, tokens (id)")


def wide_copy(dst: Path) -> None:
    """The tiny model with ROWS embedding rows (zeros above its own)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(TINY, dst)
    sd = load_file(str(TINY / "model.safetensors"))
    emb = sd["embed_tokens.weight"]
    wide = torch.zeros(ROWS, emb.shape[1], dtype=emb.dtype)
    wide[:emb.shape[0]] = emb
    sd["embed_tokens.weight"] = wide
    save_file(sd, str(dst / "model.safetensors"))
    cfg = json.loads((dst / "llm_backbone" / "config.json").read_text())
    cfg["vocab_size"] = ROWS
    (dst / "llm_backbone" / "config.json").write_text(json.dumps(cfg, indent=2))


def qwen_tokenizer_files(dst: Path) -> None:
    """The tiny tokenizer as Qwen/Qwen3-1.7B lays its tokenizer out (vocab.json + merges.txt + tokenizer_config.json
    with added_tokens_decoder; tokenizer.json too)."""
    spec = json.loads((TINY / "tokenizer.json").read_text())
    cfg = json.loads((TINY / "tokenizer_config.json").read_text())
    added = {t["id"]: t for t in spec["added_tokens"]}
    vocab = {tok: i for tok, i in spec["model"]["vocab"].items() if i not in added}
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    dst.mkdir(parents=True)
    (dst / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (dst / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    shutil.copy(TINY / "tokenizer.json", dst / "tokenizer.json")
    cfg["added_tokens_decoder"] = {str(i): {"content": t["content"], "lstrip": t["lstrip"], "normalized": t["normalized"],
                                            "rstrip": t["rstrip"], "single_word": t["single_word"],
                                            "special": t["special"]} for i, t in sorted(added.items())}
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))


def convert(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wide = tmp / "tiny-wide"
        wide_copy(wide)
        commit = "0123456789abcdef0123456789abcdef01234567"
        repo = tmp / "hub" / ("models--" + LM_REPO.replace("/", "--"))
        qwen_tokenizer_files(repo / "snapshots" / commit)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
        gguf = tmp / f"{STEM}.gguf"
        env = dict(os.environ, HF_HUB_CACHE=str(tmp / "hub"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        env.pop("TRANSCRIBE_MODELS_DIR", None)
        R.run_converter(args.upstream, "convert-canary-qwen.py", [wide, gguf, "--repo-id", "nvidia/canary-qwen-2.5b"],
                        env=env, quiet=False)
        dst = args.out / f"{STEM}.gguf.gz"
        with open(gguf, "rb") as src, gzip.GzipFile(dst, "wb", mtime=0) as out:
            shutil.copyfileobj(src, out)
        print(R.shown(dst), dst.stat().st_size, "unpacked", gguf.stat().st_size, R.sha256(gguf))
    return 0


def refs(args) -> int:
    import transcribe_cpp as T

    packed = args.out / f"{STEM}.gguf.gz"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{STEM}.gguf"
        with gzip.open(packed, "rb") as src, open(path, "wb") as out:
            shutil.copyfileobj(src, out)
        doc = {"how": HOW, "transcribe_cpp": getattr(T, "__version__", None), "gguf": R.repo_name(packed, HOME),
               "gguf_sha256": R.sha256(path), "gguf_bytes": path.stat().st_size, "runs": []}
        model = T.Model(str(path), backend="cpu")
        with model.session(n_threads=1) as session:
            for rel in CLIPS:
                pcm, digest = R.clip(rel)
                r = session.run(pcm, timestamps="none")
                doc["runs"].append({"audio": rel, "audio_sha256": digest, **R.result_of(r, tokens=False)})
                print(rel, "|", r.text, [int(t.id) for t in r.tokens][:8])
    R.write_json(args.out / f"{STEM}.ref.json", doc)
    return 0


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {"convert": (convert, []), "refs": (refs, [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""The reference side of benchmarks/audio_llm_speed.py: transformers (Granite Speech, Qwen3-ASR, Voxtral) and NeMo
(Canary-Qwen) loaded and called as their users call them; also imported by benchmarks/make_audio_llm_model.py for
its finiteness check. Only the standard library at module level (the children import torch, transformers, NeMo,
mistral-common inside functions, in the reference's virtual environment).

- granite, qwen3_asr: `AutoProcessor` + the model class's `from_pretrained(dir, dtype=...)` and `generate()`
  (audio_llm_speed.py's docstring says how the inputs are made).
- voxtral: `VoxtralForConditionalGeneration.from_pretrained(dir, dtype=...)`; the inputs as
  tools/voxtral_reference.py makes them: mistral-common's `encode_transcription` of a `TranscriptionRequest`
  (language "en"; the audio handed over as a float32 WAV, so the samples reach it exactly) for the prompt ids and
  the padded audio, then the processor's WhisperFeatureExtractor over that audio in 30 s chunks
  (`VoxtralProcessor._retrieve_input_features`, 3000 frames a chunk, padded to a multiple of 480,000 samples) for
  the features; `generate(input_ids, attention_mask, input_features, max_new_tokens, do_sample=False)`.
- canary_qwen: NeMo's `SALM.from_pretrained(dir)` (NeMo builds the LM in float32 and loads the weights into it);
  bf16: `model.to(torch.bfloat16)` (NeMo's audio front end still computes in float32: its preprocessor casts the
  input up and the features back down); a call is `model.generate(prompts=[[{"role": "user", "content":
  "Transcribe the following: <|audioplaceholder|>"}]] * n, audios, audio_lens, max_new_tokens=N)` as
  tools/canary_qwen_reference.py calls it (greedy: SALM's GenerationConfig of bos / eos / pad ids, no sampling,
  one beam), which returns the new ids only.
"""
from __future__ import annotations

import time

GRANITE_REQUEST = "<|audio|>can you transcribe the speech into a written format?"  # the model card's
CANARY_QWEN_REQUEST = "Transcribe the following: {}"  # tools/canary_qwen_reference.py (the model card's)
SAMPLE_RATE = 16000


def melspectrogram_class():
    """A stand-in for torchaudio.transforms.MelSpectrogram with torchaudio's defaults as Granite's feature
    extractor builds it (sample_rate, n_fft, win_length, hop_length, n_mels given): a centred STFT with reflect
    padding, a periodic Hann window of win_length zero-padded to n_fft (torch.stft centres it), power 2, HTK mel
    filters from 0 Hz to sample_rate / 2 without normalisation (transformers.audio_utils.mel_filter_bank, the
    triangles torchaudio's melscale_fbanks draws). Input [..., samples] -> [..., n_mels, frames]."""
    import numpy as np
    import torch
    from transformers.audio_utils import mel_filter_bank

    class MelSpectrogram(torch.nn.Module):
        def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None, n_mels=128):
            super().__init__()
            self.n_fft = n_fft
            self.win_length = win_length or n_fft
            self.hop_length = hop_length or self.win_length // 2
            self.register_buffer("window", torch.hann_window(self.win_length, periodic=True))
            fb = mel_filter_bank(num_frequency_bins=n_fft // 2 + 1, num_mel_filters=n_mels, min_frequency=0.0,
                                 max_frequency=sample_rate / 2, sampling_rate=sample_rate, norm=None,
                                 mel_scale="htk")
            self.register_buffer("fb", torch.from_numpy(np.asarray(fb, dtype=np.float32)))  # [freqs, mels]

        def forward(self, waveform):
            lead = waveform.shape[:-1]
            x = waveform.reshape(-1, waveform.shape[-1])
            spec = torch.stft(x, self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                              window=self.window, center=True, pad_mode="reflect", normalized=False,
                              onesided=True, return_complex=True).abs().pow(2.0)  # [b, freqs, frames]
            mel = torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)  # [b, mels, frames]
            return mel.reshape(lead + mel.shape[-2:])

    return MelSpectrogram


def granite_mel() -> str:
    """Which MelSpectrogram Granite's feature extractor uses: "torchaudio" where it is installed, else (after
    `load_hf_processor`) "pure-torch stand-in"."""
    import transformers.models.granite_speech.feature_extraction_granite_speech as fe

    ta = getattr(fe, "torchaudio", None)
    return "none" if ta is None else ("pure-torch stand-in" if ta.__name__ == "torchaudio_standin" else "torchaudio")


def load_hf_processor(family: str, model_path: str):
    """transformers' processor of the folder; without torchaudio, Granite's feature extractor gets the
    MelSpectrogram stand-in."""
    from transformers import AutoProcessor

    if family == "granite":
        import types

        import transformers.models.granite_speech.feature_extraction_granite_speech as fe

        if getattr(fe, "torchaudio", None) is None:  # the module imports torchaudio only where it is installed
            standin = types.ModuleType("torchaudio_standin")
            standin.transforms = types.SimpleNamespace(MelSpectrogram=melspectrogram_class())
            fe.torchaudio = standin
            fe.requires_backends = lambda *a, **k: None  # it checks for torchaudio; the stand-in is there
    return AutoProcessor.from_pretrained(model_path)


def hf_inputs(family: str, processor, pcms: list):
    """The processor's inputs for a list of float32 arrays (one batch, padded)."""
    if family == "voxtral":
        return voxtral_inputs(processor, pcms)
    if family == "granite":
        prompt = processor.tokenizer.apply_chat_template([{"role": "user", "content": GRANITE_REQUEST}],
                                                         tokenize=False, add_generation_prompt=True)
        return processor(text=[prompt] * len(pcms), audio=list(pcms), return_tensors="pt", padding=True)
    return processor.apply_transcription_request(audio=list(pcms) if len(pcms) > 1 else pcms[0], language="English")


def hf_child(family: str, model_path: str, precision: str, max_new_tokens: int, rss_mb):
    """Load the reference (transformers or NeMo) -> (RSS after imports in MB, load seconds, run): run(pcms) ->
    (texts, ids, pieces) for one call on a list of float32 arrays (one batch)."""
    if family == "canary_qwen":
        return _canary_qwen_child(model_path, precision, max_new_tokens, rss_mb)
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if family == "granite":
        from transformers import GraniteSpeechForConditionalGeneration as cls
    elif family == "voxtral":
        from transformers import VoxtralForConditionalGeneration as cls
    else:
        from transformers import Qwen3ASRForConditionalGeneration as cls
    rss_import = rss_mb()
    t0 = time.perf_counter()
    processor = load_hf_processor(family, model_path)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    model = cls.from_pretrained(model_path, dtype=dtype).eval()
    load_s = time.perf_counter() - t0
    gc = model.generation_config
    stops = gc.eos_token_id if isinstance(gc.eos_token_id, list) else [gc.eos_token_id]
    pad = gc.pad_token_id

    def run(pcms):
        inputs = hf_inputs(family, processor, pcms)
        n_prompt = inputs["input_ids"].shape[1]
        inputs = inputs.to(model.dtype)  # floating tensors only
        with torch.inference_mode():
            seq = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
        texts, ids = [], []
        for row in seq[:, n_prompt:]:
            mine = own_ids(row.tolist(), stops, pad)
            if family == "granite":
                texts.append(processor.tokenizer.decode(row, skip_special_tokens=True))
            elif family == "voxtral":
                texts.append(processor.tokenizer.tokenizer.instruct_tokenizer.tokenizer.decode(mine))
            else:
                texts.append(processor.decode(row, return_format="transcription_only"))
            ids.append(mine)
        return texts, ids, [[len(p)] for p in pcms]

    return rss_import, load_s, run


def float_wav_b64(pcm) -> str:
    """A float32 array as a base64 float WAV (mistral-common's RawAudio): the samples arrive unchanged."""
    import base64
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, pcm, SAMPLE_RATE, format="WAV", subtype="FLOAT")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def voxtral_inputs(processor, pcms: list, language: str = "en"):
    """transformers' inputs for Voxtral as tools/voxtral_reference.py makes them: mistral-common's
    encode_transcription (the prompt ids and the audio it pads) and the feature extractor's 30 s chunks. Rows
    of equal prompt length only (the benchmark's clips are all the same length)."""
    import torch
    from mistral_common.protocol.instruct.chunk import RawAudio
    from mistral_common.protocol.transcription.request import TranscriptionRequest

    mt = processor.tokenizer.tokenizer  # mistral-common's MistralTokenizer
    kw = dict(sampling_rate=SAMPLE_RATE, padding=True, truncation=False, pad_to_multiple_of=480000,
              return_tensors="pt")
    ids, feats = [], []
    for pcm in pcms:
        req = TranscriptionRequest(model="voxtral", audio=RawAudio(data=float_wav_b64(pcm), format="wav"),
                                   language=language)
        t = mt.instruct_tokenizer.encode_transcription(req)
        ids.append(t.tokens)
        feats.append(processor._retrieve_input_features([a.audio_array for a in t.audios], 3000, **kw))
    if len({len(x) for x in ids}) != 1:
        raise SystemExit("voxtral: prompts of different lengths in one batch (give clips of equal length)")
    from transformers import BatchFeature

    input_ids = torch.tensor(ids)
    return BatchFeature(dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                             input_features=torch.cat(feats)))


def salm_prompt(model) -> list:
    return [{"role": "user", "content": CANARY_QWEN_REQUEST.format(model.audio_locator_tag)}]


def salm_audio(pcms: list):
    import torch

    audios = torch.nn.utils.rnn.pad_sequence([torch.as_tensor(p, dtype=torch.float32) for p in pcms],
                                             batch_first=True)
    return audios, torch.tensor([len(p) for p in pcms], dtype=torch.long)


def _canary_qwen_child(model_path: str, precision: str, max_new_tokens: int, rss_mb):
    import logging

    import torch
    from nemo.collections.speechlm2.models import SALM

    logging.getLogger("nemo_logger").setLevel(logging.ERROR)
    rss_import = rss_mb()
    t0 = time.perf_counter()
    model = SALM.from_pretrained(model_path).eval()
    if precision == "bf16":
        model.to(torch.bfloat16)
    load_s = time.perf_counter() - t0
    stops, pad = [model.text_eos_id], model.text_pad_id
    prompt = salm_prompt(model)

    def run(pcms):
        audios, lens = salm_audio(pcms)
        with torch.inference_mode():
            seq = model.generate(prompts=[prompt] * len(pcms), audios=audios, audio_lens=lens,
                                 max_new_tokens=max_new_tokens)
        texts, ids = [], []
        for row in seq:
            mine = own_ids(row.tolist(), stops, pad)
            ids.append(mine)
            texts.append(model.tokenizer.ids_to_text(mine))
        return texts, ids, [[len(p)] for p in pcms]

    return rss_import, load_s, run


def own_ids(row: list, stops: list, pad) -> list[int]:
    """A generated row's ids up to the first stop, without padding."""
    mine = []
    for i in row:
        if i in stops:
            break
        if i != pad:
            mine.append(int(i))
    return mine


def versions(family: str) -> dict:
    """The reference's package versions for the JSON."""
    import transformers

    out = dict(transformers=transformers.__version__)
    if family == "voxtral":
        import mistral_common

        out["mistral_common"] = mistral_common.__version__
    if family == "canary_qwen":
        import nemo

        out["nemo"] = nemo.__version__
    if family == "granite":
        out["mel"] = granite_mel()
    return out

"""transformers' `generate` on tiny random decoder-only LMs (Granite with its multipliers, Qwen3 with q/k norms and
an explicit head_dim, Qwen2 with q/k/v biases, Llama with attention and MLP biases, Mistral), from prompt
embeddings of different lengths (left-padded with an attention mask, as the audio-LLMs call it): greedy and
beam search with several length penalties and early-stopping modes, several stop tokens. Writes
tests/references/llm/<name>.safetensors (the LM's weights under transformers' names, the prompts) and
<name>.json (config, stop tokens, outputs) for tests/test_llm.py.

Run in a venv with transformers 5.24 (tools/setup_nemo_venv.sh makes one):
    .venv-nemo/bin/python tools/llm_reference.py
Weights are drawn with a wide spread (std 0.3) so the argmax of each step is far from a tie.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

OUT = Path(__file__).resolve().parents[1] / "tests" / "references" / "llm"

BASE = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, pad_token_id=0,
            bos_token_id=1, eos_token_id=2)
MODELS = {
    "granite": ("GraniteForCausalLM", "GraniteConfig",
                dict(embedding_multiplier=4.0, attention_multiplier=0.09, residual_multiplier=0.5,
                     logits_scaling=2.5, tie_word_embeddings=False, rope_theta=10000.0)),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(head_dim=16, tie_word_embeddings=True, rope_theta=1000000.0)),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(tie_word_embeddings=False, rope_theta=10000.0)),
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=False, rope_theta=500000.0)),
    "mistral": ("MistralForCausalLM", "MistralConfig",
                dict(sliding_window=None, tie_word_embeddings=False, rope_theta=10000.0)),
}
LENGTHS = (7, 4, 9)  # the prompts' lengths (rows)
MAX_NEW = 14
BEAMS = [(3, 1.0, False), (3, 0.6, False), (4, 1.3, "never"), (3, 1.0, True)]


def run(name: str, cls_name: str, cfg_name: str, extra: dict) -> None:
    torch.manual_seed(sum(map(ord, name)))
    cfg = getattr(transformers, cfg_name)(**BASE, **extra)
    cfg._attn_implementation = "sdpa"
    model = getattr(transformers, cls_name)(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    d = cfg.hidden_size
    prompts = [torch.randn(n, d) for n in LENGTHS]

    def batch(rows):
        longest = max(prompts[i].shape[0] for i in rows)
        x = torch.zeros(len(rows), longest, d)
        mask = torch.zeros(len(rows), longest, dtype=torch.long)
        for j, i in enumerate(rows):
            n = prompts[i].shape[0]
            x[j, longest - n:] = prompts[i]
            mask[j, longest - n:] = 1
        return x, mask

    def gen(rows, stops, **kw):
        x, mask = batch(rows)
        out = model.generate(inputs_embeds=x, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False,
                             eos_token_id=stops, pad_token_id=0, return_dict_in_generate=True, output_scores=True,
                             **kw)
        return out

    with torch.no_grad():
        # two stop tokens the greedy outputs do produce, late: tokens of request 0 from its 6th on (and of
        # request 2 from its 9th) that no request produces earlier
        free = gen([0, 1, 2], [96]).sequences.tolist()

        def late(row, start):
            for t in free[row][start:]:
                if all(t not in free[r][:start] for r in range(3)):
                    return t
            return None

        stops = sorted({t for t in (late(0, 5), late(2, 8)) if t is not None} or {95})
        if len(stops) < 2:
            stops.append(96 if 96 not in stops else 95)
        single = {i: gen([i], stops).sequences[0].tolist() for i in range(len(prompts))}
        together = gen([0, 1, 2], stops).sequences.tolist()
        beams = []
        for n, lp, es in BEAMS:
            for rows in ([0], [1], [0, 1, 2]):
                out = gen(rows, stops, num_beams=n, num_return_sequences=n, length_penalty=lp, early_stopping=es)
                seqs = out.sequences.view(len(rows), n, -1).tolist()
                scores = out.sequences_scores.view(len(rows), n).tolist()
                beams.append({"num_beams": n, "length_penalty": lp, "early_stopping": es, "requests": rows,
                              "sequences": seqs, "scores": scores})
        x, _ = batch([0])
        logits = model(inputs_embeds=x).logits[0]
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith("inv_freq")}
    if cfg.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    for i, p in enumerate(prompts):
        tensors[f"prompt.{i}"] = p.contiguous()
    tensors["prompt0_logits"] = logits.contiguous()
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT / f"{name}.safetensors"))
    text_cfg = json.loads(cfg.to_json_string())
    doc = {
        "made_by": "tools/llm_reference.py", "transformers": transformers.__version__, "torch": torch.__version__,
        "class": cls_name, "config": text_cfg, "stop_ids": stops, "pad_id": 0, "max_new_tokens": MAX_NEW,
        "greedy_single": single, "greedy_batch": together, "beam": beams,
        "note": "sequences hold the generated tokens only (inputs_embeds: transformers returns no prompt), "
                "padded with pad_id 0 after a stop token",
    }
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(name, stops, single[0])


def main() -> None:
    torch.set_num_threads(1)
    for name, (cls_name, cfg_name, extra) in MODELS.items():
        run(name, cls_name, cfg_name, extra)


if __name__ == "__main__":
    main()

"""Decoder-only language models as the audio-LLM recognizers use them (Granite Speech, Qwen3-ASR, and next
Voxtral and Canary-Qwen): the configuration (`config.py`), the network with its key/value cache (`model.py`,
Granite's multipliers, Qwen3's q/k norms, Llama / Mistral / Qwen2 layouts), batched generation with greedy and
beam search as transformers' `generate` runs them (`generate.py`) and Hugging Face `tokenizer.json` files
(`tokenizer.py`). A family builds its prompt, writes its audio embeddings over the placeholder rows and hands the
embedding sequences to `generate`; it owns its chat format, its checkpoint names and its text parsing.
"""

"""IBM Granite Speech's building blocks shared by its families (`granite/`: the NAR editor models;
`granite_speech/`: the autoregressive audio-LLMs): the conformer encoder."""

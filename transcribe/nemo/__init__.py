"""NeMo's building blocks that several families share: reading `.nemo` archives (`checkpoint`), the
`preprocessor` and `encoder` config sections (`config`), NeMo's mel front end (`frontend`) and the
FastConformer encoder with its subsampling (`conformer`, `subsampling`). Parakeet, Canary and Sortformer
are built on them; none of them knows a family."""

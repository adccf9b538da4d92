"""Output-length prediction, as it runs in the gateway: the lexical online model
(``lexical``, ``features``, shared through Redis by ``store`` and ``sync``), the prior,
the optional embedding and fine-tuned models, and the name -> factory table
(``factory``). Evaluation and training tools live apart, in ``tools``."""

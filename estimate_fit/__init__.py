"""The token estimator's fitting toolchain: it fits the weights of ``plimsoll/profiles.json`` (``python -m
estimate_fit.fit_profiles``) on reference tokenizers' counts, made tool output and real agent runs (``data/``).
The benchmarks (``bench/``) and the tests import it; the service never does."""

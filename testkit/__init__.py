"""Shared support for tests, benchmarks and the chaos runs; never shipped in the wheel.

- :mod:`testkit.scripted_server`: a scripted OpenAI-compatible HTTP server on 127.0.0.1, so the
  real ``openai`` client runs end to end with no network;
- :mod:`testkit.scripted_models`: scripted memory models that answer through it;
- :mod:`testkit.memory_snapshot`: what two runs of one workload must share (memory compared as sets);
- :mod:`testkit.handlers`: no-op, slow, failing and gated job handlers for queue tests and benchmarks.

It imports ``protocol`` and ``persistence`` only; ``bench`` and ``tests`` import it, production code
never does.
"""

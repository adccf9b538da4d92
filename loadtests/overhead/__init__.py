"""``triage bench overhead``: what the gateway itself costs per request.

A simulated backend with near-zero step time stands behind each target, so what a
target adds over ``direct`` is the target's own cost. Modules:

- ``httpclient``: a minimal HTTP/1.1 keep-alive client protocol (httptools parser),
  cheap enough that one process can drive 1,000 streams a second.
- ``openloop``: the fixed-rate open-loop generator built on it.
- ``relaytest``: many long streams at once, to find how many chunks a second a target relays.
- ``worker``: the generator's own process (uvloop, optionally pinned to a core).
- ``targets``: starting and stopping the simulator, Redis, the gateways and LiteLLM.
- ``procstat`` / ``redisstats``: CPU seconds from ``/proc`` and Redis ``INFO commandstats``.
- ``steps``: one measured step (one rate, one target) and the numbers taken around it.
- ``relay``: the relay-throughput experiment.
- ``profiling``: py-spy against a target under load, and the hot spots it saw.
- ``stats``: percentile summaries.
- ``report``: JSON and Markdown.
- ``cli``: ``add_arguments(parser)`` and ``run(args)``.
"""

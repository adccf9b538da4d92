"""``triage bench chaos``: a hostile client's view of the gateway (docs/benchmarks/reliability.md).

``rawhttp`` speaks HTTP/1.1 over a bare socket (so malformed requests stay malformed),
``fuzz`` makes seeded bad requests, ``storm`` disconnects many clients at random points,
``slow`` trickles bytes, ``soak`` runs two replicas for a while and samples their memory,
``checks`` asserts what must hold after each (no 5xx, nothing left in Redis, ...).
"""

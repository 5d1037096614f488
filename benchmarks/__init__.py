"""Benchmarks of taskiq-fanin against the seed's measurements (``make bench``).

``python -m benchmarks`` runs all three; ``python -m benchmarks.deadlock``,
``.duplicates`` and ``.overhead`` run one each. See ``benchmarks/README.md``.
"""

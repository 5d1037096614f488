"""The engine's entry: a message's run, as the worker reports it, handed down.

The worker turns taskiq's hooks into two events (:mod:`events`): a run starts
and a run ended. Each enters here once (:class:`~taskiq_fanin.engine.runs.Runs`)
and goes down: the run guard and its leases for a start; for an end, the
member's outcome made and recorded, the chain carried on, the continuation or
``on_error`` completed, each part once, retried while Redis is away.
"""

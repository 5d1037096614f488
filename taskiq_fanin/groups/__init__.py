"""The group engine: plan a group, record outcomes, finalise, run its continuation.

It validates and plans groups, records members' outcomes, finalises a group
exactly once, guards and completes its continuation, and reads groups back. It
knows nothing of chains: a member that is a chain is checked and started through
the context's ``check_chain`` and ``start_chain`` ports, into which the
middleware plugs the chain engine.
"""

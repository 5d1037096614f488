"""The Redis layer: keys, Lua scripts and their wrappers, pipelines, batching.

The key layout, the Lua scripts and their typed wrappers, the pipelining of
commands, the batching of outcomes, and pipelined kicks on taskiq-redis's queue
brokers.
"""

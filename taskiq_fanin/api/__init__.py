"""The public verbs, on a broker: group, chain, @group_task, status, cancel, sweep.

The top of the library (only the command line is above it). Each verb finds the
broker's ``FanInContext`` and hands the work to the engine that owns it.
"""

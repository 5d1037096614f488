"""The worker side: ``FanInMiddleware`` and the skipping of a task body.

The middleware's taskiq hooks hand each event to the engine that owns it.
"""

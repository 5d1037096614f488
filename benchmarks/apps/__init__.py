"""The task modules benchmark workers run: ``taskiq worker <module>:worker_broker``.

Each module registers its tasks on a broker built from :class:`AppSettings`: the
benchmark process builds the same broker to kick them, and a worker process reads
its settings from the environment, so one module serves every run on its own queue.
"""

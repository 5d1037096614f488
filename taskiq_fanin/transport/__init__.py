"""Transport: how the library's commands and kicks reach Redis and the broker.

The client (from a URL, a Sentinel, a Cluster), the shared pipeline, the
batching of one group's outcomes into one script call and its hand-over,
replication (``WAIT``), the kicks on taskiq-redis's queue brokers, and riding
through Redis being away. It knows no key, record or script of the library.
"""

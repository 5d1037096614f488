"""What the library is about, as values; the bottom layer.

Groups and chains (``spec``), their options, signatures, labels, results and
status models, the middleware's config and the error tree. It imports nothing
of the library.
"""

"""The chain engine: steps, their travelling cursor, the record, the saga.

A chain starts here and is carried on step by step; when one stops early, its
error continuation and compensations run. It plans a group step through the
group engine below it.
"""

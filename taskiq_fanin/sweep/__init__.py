"""The sweep: finds groups and chains that stopped moving, and acts on them.

It reports, re-drives or gives up on each by its sweep policy, and recovers
finalisers that died.
"""

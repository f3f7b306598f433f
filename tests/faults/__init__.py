"""A fault-injecting upstream and the census of how every fault ends (`python -m tests.faults`)."""

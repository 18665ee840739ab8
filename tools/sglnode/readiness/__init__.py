"""Is the server up yet, and if it died, when: the readiness subsystem.

client.py talks to SGLang's HTTP API (health, generate, PD through the router); logwatch.py follows a
log (file, container, compose service, unit); loglines.py knows the pinned SGLang's own log lines (from
the pinned wheel's catalogue); startup.py turns them into startup stages; waiter.py combines all of
it with the diagnosis into `sglnode wait`.
"""

"""Exit codes shared by every sglnode command (each command documents the ones it adds)."""

EXIT_OK = 0
# A check did not pass: an invalid topology, a missed benchmark target.
EXIT_FAILED = 1
# Bad command line. BSD sysexits' EX_USAGE, because 2 is `sglnode wait`'s "crashed".
EXIT_USAGE = 64

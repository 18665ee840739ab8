"""Exit codes shared by every sglnode command (each command documents the ones it adds)."""

EXIT_OK = 0
# A check did not pass: an invalid topology, a missed benchmark target.
EXIT_FAILED = 1
# Bad command line. BSD sysexits' EX_USAGE, because 2 is `sglnode wait`'s "crashed".
EXIT_USAGE = 64
# A bug in sglnode itself (BSD sysexits' EX_SOFTWARE): the message asks for a report; never a traceback.
EXIT_INTERNAL = 70
# Interrupted: the shell's 128 + signal number (sglnode.interrupts).
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

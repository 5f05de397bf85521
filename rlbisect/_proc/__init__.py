"""Private: every child process rlbisect starts, and the one fork server that makes them cheap.

- ``runner``    run a child: its own process group, a timeout, Ctrl-C, a watchdog, bounded output
- ``worker``    the one protocol of rlbisect's probe programs (reply file; exit 0 / 1 / 125)
- ``server``    the fork server: torch imported once; serves ``rlbisect check`` and probe workers
- ``client``    the caller's side: hand a check or a probe to a server, or run it here
- ``identity``  when a server's fork is the process the caller would have started
- ``signals``   SIGINT/SIGTERM/SIGHUP during a bisect: a flag, never a half-run git command
- ``tempdirs``  our temporary directories, marked, and the sweep of those a killed run left
- ``startup``, ``forked``, ``quiet``: start-up cost, forked ``--matrix`` rows, stdout kept clean
"""

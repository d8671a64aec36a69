"""Wall-clock bounds in tests. A test that times a wall-clock limit (the SQL sandbox's) must measure wall time, and
under the whole suite on 2 cores a process can wait seconds for a core: such a bound is the limit plus this slack.
Unstopped, the queries these tests run take minutes, so the slack does not hide a limit that fails to fire. Checks
of an algorithm's cost measure ``time.process_time()`` instead, which a loaded machine does not change."""

LOADED_MACHINE_SLACK_S = 2.0

"""What the benchmark scripts share: child processes, wrk, CPU accounting, databases,
the gateway's settings and loads, rounds and the comparison's goals, reports."""

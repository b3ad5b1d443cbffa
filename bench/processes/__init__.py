"""Programs the benchmarks run as processes of their own: the gateway from given
settings, the zero-latency upstream, the bare server, the DBOS peer."""

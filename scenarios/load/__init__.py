"""Load scenarios: the end-to-end benchmark of the gateway and its dispatcher."""

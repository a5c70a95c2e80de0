"""The consistency checker: a history recorder, a linearizability search and change-feed
checks for a kvatlas cluster under faults (docs/consistency.md)."""

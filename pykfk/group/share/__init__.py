"""Share groups (KIP-932): queues on the log. ``partition`` holds one share-partition's
delivery state; ``coordinator`` the groups, their members and assignment, share sessions,
and the state kept in ``__share_group_state``."""

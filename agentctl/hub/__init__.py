"""The reference hub (`agentctl hub`): the upstream many daemons connect to, its store, status page and commands."""

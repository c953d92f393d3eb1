"""The swarms front door: GroupChat and the history formats of its conversations."""

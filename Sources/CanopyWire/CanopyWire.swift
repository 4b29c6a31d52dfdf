// CanopyWire: the pure wire codec (frames, messages, limits). See Protocol/replication-v1.md.

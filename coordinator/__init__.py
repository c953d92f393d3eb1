"""The coordinator: leases rooms, runs their turn loops, and is each room's only writer."""

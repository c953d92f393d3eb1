"""The tools a worker offers its agents: Python functions (``@parley.tool``) and MCP
servers' tools, behind one interface (base.py)."""

"""`ocihook audit`: read audit logs, tie AVC denials to ocihook's containers, explain them.

parse (audit text -> events) -> records (events -> containers and injected files)
-> explain (cause and fix per denial) -> report (table or JSON). cli wires them together.
"""

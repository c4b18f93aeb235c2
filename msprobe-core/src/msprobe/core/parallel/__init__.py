"""Runs of several processes, seen as the one global run they compute: shards and data-parallel shares merged
(``merge``), their statistics rebuilt (``stats``), and the names data-parallel wrappers give modules undone
(``names``). Framework-free: it reads what the backends record in dump.json (see docs/parallel.md)."""

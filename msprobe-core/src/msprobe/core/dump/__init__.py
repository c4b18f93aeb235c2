"""The dump format: what an entry holds, which entries are kept, and how they reach disk."""

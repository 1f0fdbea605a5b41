"""Everything that runs on Spark: the stages (split, outbox, recycled), the operator's writes, retention,
erasure, the claims writer and the session, embedded or over Spark Connect. It reads through `engine.lake`;
nothing in `engine.lake` imports from here."""

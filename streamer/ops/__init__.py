"""Operations: metrics, logs, the ops server, start-up errors and paths."""

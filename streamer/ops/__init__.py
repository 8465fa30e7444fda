"""Operations: health, the metrics read from the running parts, the ops server, start-up
errors, config reload and the version report."""

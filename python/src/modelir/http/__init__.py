"""All HTTP I/O: the executor (connection reuse, deadlines, retries, cancellation) and the pieces it is made of."""

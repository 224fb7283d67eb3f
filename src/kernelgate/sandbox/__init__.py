"""The trust boundary: candidate code runs only in a worker process; the judge sees bytes."""

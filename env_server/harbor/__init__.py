"""regrow's tasks as Harbor task directories (`regrow tasks export --format harbor`), for trainers that read those."""

"""Runner-neutral data: what a dialect asks for (`request`), the fully resolved job a runner executes (`job`),
and the typed events a runner answers with (`events`). Nothing here imports MLX."""

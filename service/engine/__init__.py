"""The MLX engine: one internal request/response model, a dedicated MLX thread, and the decode loop."""

"""The torch engine: a seeded random decoder, a paged KV cache, and the real-time serving loop."""

"""Load generation against OpenAI-compatible endpoints: the request plan, the open-loop runner, the SSE client."""

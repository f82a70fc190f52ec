"""End-to-end tests: the real OpenCode, the real LiteLLM proxy, Ray, a browser, a terminal
(each marked e2e; `pytest -m "e2e or not e2e"` and scripts/test run them)."""

"""What the tests (and scripts/demo.py, scripts/bench) share: the scripted model servers, a real
LiteLLM proxy run offline, and builders of test values."""

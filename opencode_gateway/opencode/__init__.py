"""Everything about OpenCode itself: its config, its process and its events. Knows nothing of HTTP."""

"""Everything about OpenCode itself: its config, its process and its events. Knows nothing of HTTP.

May import: errors, terminal, `_yaml`, accounting/'s records."""
